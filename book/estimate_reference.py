# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# (estimate-reference)=
# # The estimator's fields
#
# `inferbook estimate` answers, for a model and a chip, the questions a deployment starts with:
# does it fit, how long does a decode step take, how long until the first token, how many tokens
# per second for one user and for all of them — on one chip or many. It is the book's models
# joined into one function (`inferbook.perf.estimator.estimate`): the roofline of chapters 2 and
# 3, the tensor-parallel latency of chapter 4, the KV-cache sizes of chapter 5, the collectives
# of chapters 8–10, its step times computed by the library's one step-time formula
# (`inferbook.perf.step_cost.step_time`). This page defines every number it prints. Chapter 3 shows it at work and
# ends with a walk from a downloaded `config.json` to a latency–throughput plot.
#
# Its times come in two views. By default each step is priced under the chip's *calibrated
# efficiency*: the fractions of memory bandwidth and FLOP/s, and the fixed costs per layer and
# per collective, that a least-squares fit to published measurements found (`inferbook
# calibrate`; chapter 3's "How good is the estimate?"). `--ideal` gives the bare roofline the
# chapters teach first: every roof reached, nothing else paid.
#
# ```bash
# inferbook estimate --model llama-3.1-70b --hardware "H100 SXM" --chips 8 \
#     --batch 1,8,64 --context 8192 --prompt 2048 --plot pareto.png
# inferbook estimate --config path/to/config.json --hardware "TPU v5e" --chips 8 --json
# inferbook estimate --list models        # or: --list chips
# ```

# %% [markdown] tags=["lang-zh"]
# (estimate-reference)=
# # 估算器的字段
#
# `inferbook estimate` 针对一个模型和一种芯片，回答部署之初要问的那些问题：放得下吗，一个解码步骤
# 要多久，首个词元（token）要等多久，单个用户和全体用户每秒各能得到多少词元——单芯片或多芯片皆可。它是把本书
# 的各个模型合成的一个函数（`inferbook.perf.estimator.estimate`）：第 2、3 章的屋顶线，第 4 章的
# 张量并行延迟，第 5 章的 KV 缓存大小，第 8–10 章的集合通信；它的步骤时间由库中唯一的步骤时间公式
# （`inferbook.perf.step_cost.step_time`）计算。本页定义它输出的每一个数字。第 3 章
# 展示它的实际用法，并以一段完整的演示收尾：从下载的 `config.json` 一直走到一张延迟–吞吐量图。
#
# 它的时间有两种视角。默认情况下，每一步的耗时都按芯片的*校准效率*估算：对已发布的测量结果做最小二乘
# 拟合（`inferbook calibrate`；第 3 章的“估算有多准？”）得到的内存带宽与 FLOP/s 的达成比例，以及
# 每层、每次集合通信的固定开销。`--ideal` 给出各章最先讲授的纯屋顶线：每个屋顶都达到，此外什么
# 代价都不付。
#
# ```bash
# inferbook estimate --model llama-3.1-70b --hardware "H100 SXM" --chips 8 \
#     --batch 1,8,64 --context 8192 --prompt 2048 --plot pareto.png
# inferbook estimate --config path/to/config.json --hardware "TPU v5e" --chips 8 --json
# inferbook estimate --list models        # 或者：--list chips
# ```

# %% [markdown]
# ## Inputs
#
# | flag | meaning |
# |---|---|
# | `--model PRESET` / `--config PATH` | a preset (`--list models`), or a Hugging Face `config.json` (or the folder holding it) of Llama 1–3.x, Mistral, Mixtral, Qwen2/2.5/3, Qwen-MoE, Gemma/Gemma-2/Gemma-3 (the language model of a multimodal config), Phi-2, Phi-3, DeepSeek-V2/V3, GPT-2, GPT-NeoX (Pythia), OLMo-2, OLMoE, SmolLM3, StableLM, Granite, Cohere (Command-R) or StarCoder2. Keys that change no size or FLOP (a rotary-scaling rule, an activation, token ids, `quantization_config`) are read or ignored, never refused; a family the book cannot describe is refused in one line naming `model_type` and its value. |
# | `--hardware NAME` / `--hardware-config PATH` | a chip of the registry (`--list chips`, the [hardware table](hardware.py)) or a JSON file with `hbm_bytes`, `hbm_bandwidth` (B/s) and `flops` (FLOP/s), and for several chips `interconnect` (`"ICI"` for a torus, anything else for a switch), `link_bytes_per_s`, `links`, `hop_latency_s`, `max_chips`, and for several hosts `dcn_bytes_per_s`, `dcn_latency_s`. Every number must be positive and finite. |
# | `--chips N` | chips serving one copy of the model (default 1), at most the chips one interconnect domain joins unless `--chips-per-host` spreads them over hosts. |
# | `--chips-per-host H` | the chips are H to a host, each host one interconnect domain (an HGX board's 8 GPUs; for TPUs, whose ICI joins the hosts of a slice, the chips of one slice); N must fill whole hosts, and collectives between hosts are priced on the data-centre network (below). It combines with every other flag: the efficiency prices the network's collectives as the others, and `--breakdown` shows their share. |
# | `--layout 1d-ws\|2d-ws\|expert-parallel` | the sharded layout of chapters 8–10, or for a mixture of experts the expert-parallel layout of chapter 14 (each of Z groups holds E/Z experts whole and a copy of everything else split over Y = n / Z as in 1d-ws, and serves B/Z of the sequences); by default the layout and split whose decode step is fastest, printed. |
# | `--batch B[,B...]` | sequences decoded together (default 1). |
# | `--context S[,S...]` | tokens each sequence holds in its cache at the decode step (default: the model's positions). Beyond the model's positions: a warning, or an error with `--strict`. |
# | `--prompt T` | prompt tokens each sequence prefills (default: the context); at most the context. |
# | `--weights bf16\|fp8\|int8\|int4[:group]` | the storage of the layers' matrices, scales counted (below). Default `bf16`. |
# | `--kv bf16\|fp8\|int8` | the storage of the KV cache, scales counted (below). Default `bf16`. |
# | `--weight-bytes X` / `--kv-bytes X` | instead of a format: X bytes per parameter / per cached number, no scales (the sources' convention), 0.125 to 8. |
# | `--plot FILE.png` | latency per token against throughput per chip for every row, the Pareto frontier drawn through the rows that fit (also `.svg`, `.pdf`). |
# | `--json` | one JSON object, or a list of them for a sweep (several batches or contexts). |
# | `--compute bf16\|fp8\|int8` | the format the matmuls run in, at the chip's peak for it (default `bf16`); a chip without that peak is refused. |
# | `--ideal` | the bare roofline: every roof reached, no fixed cost, a prefill's collectives hidden behind its work. Default: the chip's calibrated efficiency (below). |
# | `--mbu X` / `--mfu X` | replace the efficiency's achieved fraction of memory bandwidth / of peak FLOP/s (of every compute format), above 0 and at most 1. |
# | `--prefill-overlap on\|off` | whether a prefill's collectives overlap with its work. Default: the efficiency's — off on GPUs, whose NCCL all-reduces run between the matmuls that need them; on for TPUs, whose XLA runs collectives beside the work, and under `--ideal`. |
# | `--output N` | tokens each sequence generates after its prompt: adds the whole generation, its prefill and N − 1 decode steps. Past the model's positions: a warning, or an error with `--strict`. |
# | `--price DOLLARS` | dollars per chip-hour (a leading `$` allowed): adds the cost per million tokens. |
# | `--breakdown` | prints where the decode step's time goes (the `breakdown` field, below; `--json` always holds it). |
#
# Several `--batch` and `--context` values make a sweep: one row per (context, batch), contexts
# outer. Warnings (a context beyond the model's positions, a batch that does not fit) go to
# stderr, one line each; with `--json` they are also in each row's `warnings`. Bad input of any
# kind is exit code 2 and one line on stderr naming the flag. The library's `estimate` checks its
# arguments with the same functions (`inferbook.perf.estimate_inputs`) and refuses the same input
# with the same words, as a `ValueError` naming the argument.

# %% [markdown] tags=["lang-zh"]
# ## 输入
#
# | 参数 | 含义 |
# |---|---|
# | `--model PRESET` / `--config PATH` | 一个预设（`--list models`），或者一个 Hugging Face 的 `config.json`（或存放它的文件夹），模型家族可以是 Llama 1–3.x、Mistral、Mixtral、Qwen2/2.5/3、Qwen-MoE、Gemma/Gemma-2/Gemma-3（多模态配置中的语言模型）、Phi-2、Phi-3、DeepSeek-V2/V3、GPT-2、GPT-NeoX（Pythia）、OLMo-2、OLMoE、SmolLM3、StableLM、Granite、Cohere（Command-R）或 StarCoder2。不改变任何大小或 FLOP 的键（旋转位置编码的缩放规则、激活函数、词元 id、`quantization_config`）会被读取或忽略，但绝不会被拒绝；本书无法描述的模型家族会被拒绝，并用一行信息指出 `model_type` 及其值。 |
# | `--hardware NAME` / `--hardware-config PATH` | 注册表中的一种芯片（`--list chips`，见[硬件表](hardware.py)），或者一个 JSON 文件，含 `hbm_bytes`、`hbm_bandwidth`（B/s）和 `flops`（FLOP/s），多芯片时还要有 `interconnect`（`"ICI"` 表示环面拓扑，其他任何值表示交换机）、`link_bytes_per_s`、`links`、`hop_latency_s`、`max_chips`，多主机时还要有 `dcn_bytes_per_s`、`dcn_latency_s`。每个数都必须是有限的正数。 |
# | `--chips N` | 为一份模型副本服务的芯片数（默认为 1），最多为一个互连域所能连接的芯片数，除非用 `--chips-per-host` 把它们分布到多台主机上。 |
# | `--chips-per-host H` | 每台主机 H 个芯片，每台主机是一个互连域（一块 HGX 板上的 8 块 GPU；对 TPU 而言，ICI 把一个切片内的各主机连在一起，所以是一个切片的芯片）；N 必须正好占满若干台主机，主机之间的集合通信按数据中心网络估算耗时（见下文）。它可以与其他每个参数一起使用：效率对网络上的集合通信与对其他集合通信一样适用，`--breakdown` 给出它们所占的部分。 |
# | `--layout 1d-ws\|2d-ws\|expert-parallel` | 第 8–10 章的分片布局，或者对混合专家模型使用第 14 章的专家并行布局（Z 组中的每一组完整地持有 E/Z 个专家，以及按 1d-ws 方式在 Y = n / Z 个芯片上切分的其余一切的一份副本，并服务 B/Z 个序列）；默认选出解码步骤最快的布局及切分，并打印出来。 |
# | `--batch B[,B...]` | 一起解码的序列数（默认为 1）。 |
# | `--context S[,S...]` | 在解码步骤时，每个序列缓存中已有的词元数（默认：模型的位置数）。超出模型的位置数时给出警告；加上 `--strict` 时则报错。 |
# | `--prompt T` | 每个序列预填充的提示词词元数（默认：上下文长度）；最多等于上下文长度。 |
# | `--weights bf16\|fp8\|int8\|int4[:group]` | 各层矩阵的存储格式，缩放因子计算在内（见下文）。默认为 `bf16`。 |
# | `--kv bf16\|fp8\|int8` | KV 缓存的存储格式，缩放因子计算在内（见下文）。默认为 `bf16`。 |
# | `--weight-bytes X` / `--kv-bytes X` | 不指定格式，而是直接给出每个参数 / 每个缓存数值占 X 字节，不计缩放因子（原文的约定），取值范围 0.125 到 8。 |
# | `--plot FILE.png` | 对每一行画出每词元延迟与每芯片吞吐量的关系，并穿过放得下的那些行画出帕累托前沿（也可以是 `.svg`、`.pdf`）。 |
# | `--json` | 一个 JSON 对象；扫描时（多个批次或上下文）则是由它们组成的列表。 |
# | `--compute bf16\|fp8\|int8` | 矩阵乘法运行所用的格式，按芯片在该格式下的峰值计算（默认为 `bf16`）；没有该峰值的芯片会被拒绝。 |
# | `--ideal` | 纯屋顶线：每个屋顶都达到，没有固定开销，预填充的集合通信被它的计算掩盖。默认：芯片的校准效率（见下文）。 |
# | `--mbu X` / `--mfu X` | 替换效率中内存带宽 / 峰值 FLOP/s（所有计算格式的）的达成比例，大于 0 且至多为 1。 |
# | `--prefill-overlap on\|off` | 预填充的集合通信是否与它的计算重叠。默认：按效率的设定——在 GPU 上为 off，因为 NCCL 的全规约在需要它的矩阵乘法之间运行；在 TPU 上（XLA 让集合通信与计算并行运行）以及使用 `--ideal` 时为 on。 |
# | `--output N` | 每个序列在提示词之后生成的词元数：增加整个生成过程，即它的预填充和 N − 1 个解码步骤。超出模型的位置数时给出警告；加上 `--strict` 时则报错。 |
# | `--price DOLLARS` | 每芯片每小时的美元价格（可以带前导 `$`）：增加每 10⁶ 个词元的成本。 |
# | `--breakdown` | 打印解码步骤的时间花在哪里（即下文的 `breakdown` 字段；`--json` 总是包含它）。 |
#
# 给出多个 `--batch` 和 `--context` 值就构成一次扫描：每个（上下文，批次）组合一行，上下文在外层。
# 警告（上下文超出模型的位置数、某个批次放不下）写到 stderr，每条一行；使用 `--json` 时，它们也
# 出现在每一行的 `warnings` 里。任何一种错误输入都会以退出码 2 结束，并在 stderr 上用一行指出是哪个
# 参数。库中的 `estimate` 用同一组函数（`inferbook.perf.estimate_inputs`）检查它的参数，对同样的输入
# 给出同样的拒绝说明，以一个指明参数的 `ValueError` 抛出。

# %% [markdown]
# ## Fields
#
# Notation as in the rest of the book: B batch, S context, T prompt, L layers, D width, N query
# heads, K KV heads, H head dimension, V vocabulary; n chips, W and C the bandwidth and the
# compute format's peak FLOP/s of one chip.
#
# ### What is estimated
#
# | field | unit | definition |
# |---|---|---|
# | `model`, `hardware`, `chips` | | the inputs, as named |
# | `layout`, `layout_x`, `layout_yz` | | the layout of the n chips (`null` for one chip) and its split X · YZ = n (1D and expert-parallel: X = 1) |
# | `expert_chips` | | Z, the chips the routed experts are split over whole in the expert-parallel layout (the rest over Y = n / Z); 1 otherwise |
# | `compute` | | the format the matmuls run in |
# | `efficiency`, `mbu`, `mfu` | | the efficiency the times are priced under — `ideal`, or `calibrated` (with the fitted chip it takes its figures from, for a chip without published points) — and its achieved fractions of memory bandwidth (for the weights) and of the compute format's peak |
# | `batch`, `context`, `prompt` | tokens | B, S and T |
# | `weights`, `kv` | | the formats, e.g. `int4:128`, or `2 bytes` with `--weight-bytes` |
# | `weight_bytes` | bytes | `param_bytes / params`: average bytes per parameter, scales included |
# | `kv_bytes_per_element` | bytes | bytes per cached number, its share of a scale included |

# %% [markdown] tags=["lang-zh"]
# ## 字段
#
# 记号与本书其他部分相同：B 批次，S 上下文，T 提示词，L 层数，D 宽度，N 查询头数，K KV 头数，
# H 头维度，V 词表大小；n 为芯片数，W 和 C 为单个芯片的带宽和该计算格式的峰值 FLOP/s。
#
# ### 估算的对象
#
# | 字段 | 单位 | 定义 |
# |---|---|---|
# | `model`、`hardware`、`chips` | | 输入，即所指定的名称 |
# | `layout`、`layout_x`、`layout_yz` | | n 个芯片的布局（单芯片时为 `null`）及其切分 X · YZ = n（一维布局和专家并行：X = 1） |
# | `expert_chips` | | Z，专家并行布局中路由专家被完整切分到的芯片数（其余部分切分到 Y = n / Z 个芯片上）；其他情况为 1 |
# | `compute` | | 矩阵乘法运行所用的格式 |
# | `efficiency`、`mbu`、`mfu` | | 估算时间所用的效率——`ideal`，或者 `calibrated`（对于没有已发布数据点的芯片，附上它借用数字的那款已拟合芯片）——以及它对内存带宽（用于权重）和该计算格式峰值的达成比例 |
# | `batch`、`context`、`prompt` | 词元 | B、S 和 T |
# | `weights`、`kv` | | 存储格式，例如 `int4:128`，使用 `--weight-bytes` 时则如 `2 bytes` |
# | `weight_bytes` | 字节 | `param_bytes / params`：每个参数平均占用的字节数，缩放因子计算在内 |
# | `kv_bytes_per_element` | 字节 | 每个缓存数值占用的字节数，包括它分摊的缩放因子 |

# %% [markdown]
# ### Memory
#
# | field | unit | definition |
# |---|---|---|
# | `params` | count | every parameter, each tied tensor once: what `model.num_parameters()` of transformers reports (`perf.params.tensors` lists them: biases, q/k norms, Gemma's four norms per layer, learned positions, LayerNorm biases, routers, experts, shared experts and their gates, DeepSeek-V3's score bias, latent-attention projections and norms) |
# | `active_params` | count | the parameters one token uses: all, except k of the E routed experts of each MoE layer |
# | `param_bytes` | bytes | the weights in the chosen format (below) |
# | `kv_bytes_per_token` | bytes | what one token adds to every layer's cache: 2·L·K·H·e, latent attention L·(R_kv + H_rope)·e |
# | `kv_bytes` | bytes | the cache of the batch: B · Σ over layers of min(S, W_layer) · (per-layer bytes per token), W_layer the window of a sliding layer (none for a full one) |
# | `total_bytes` | bytes | the weights held + copies · `kv_bytes`. The weights held are `param_bytes`, and in the expert-parallel layout Z − 1 more copies of all but the routed experts; copies is 1, or for latent attention the chips that split its heads (n, or Y in the expert-parallel layout: its latent has no heads to split, so each of them keeps all of it) |
# | `hbm_bytes` | bytes | n · the chip's memory |
# | `fits` | bool | `total_bytes ≤ hbm_bytes` |
# | `max_batch` | sequences | the largest B that fits at this context: ⌊(hbm_bytes − weights held) / (copies · one sequence's cache)⌋, exactly |
#
# All bytes are decimal in JSON; the table prints GB (10⁹) and GiB (2³⁰) side by side, since
# datasheets print "80 GB" and most other tools report GiB. Activations are left out: with a KV
# cache and a fused attention they are a few vectors per token (chapter 3).

# %% [markdown] tags=["lang-zh"]
# ### 内存
#
# | 字段 | 单位 | 定义 |
# |---|---|---|
# | `params` | 个数 | 全部参数，共享（绑定）的张量只算一次：即 transformers 的 `model.num_parameters()` 报告的数目（`perf.params.tensors` 把它们一一列出：偏置、q/k 的归一化、Gemma 每层的四个归一化、可学习的位置嵌入、LayerNorm 的偏置、路由器、专家、共享专家及其门控、DeepSeek-V3 的得分偏置、潜在注意力的投影与归一化） |
# | `active_params` | 个数 | 一个词元用到的参数：全部参数，但每个 MoE 层的 E 个路由专家中只算 k 个 |
# | `param_bytes` | 字节 | 按所选格式存储的权重（见下文） |
# | `kv_bytes_per_token` | 字节 | 一个词元给每一层缓存增加的字节数：2·L·K·H·e，潜在注意力为 L·(R_kv + H_rope)·e |
# | `kv_bytes` | 字节 | 整个批次的缓存：B · 对各层求和 min(S, W_layer) ·（该层每词元的字节数），W_layer 是滑动窗口层的窗口（全注意力层没有窗口） |
# | `total_bytes` | 字节 | 持有的权重 + 副本数 · `kv_bytes`。持有的权重为 `param_bytes`，在专家并行布局中再加上除路由专家之外全部权重的 Z − 1 份副本；副本数为 1，对潜在注意力则为切分其注意力头的芯片数（n，或专家并行布局中的 Y：它的潜在向量没有头可以切分，所以其中每个芯片都保存全部） |
# | `hbm_bytes` | 字节 | n · 单个芯片的内存 |
# | `fits` | 布尔值 | `total_bytes ≤ hbm_bytes` |
# | `max_batch` | 序列数 | 在该上下文下放得下的最大 B：⌊(hbm_bytes − 持有的权重) / (副本数 · 一个序列的缓存)⌋，精确计算 |
#
# JSON 中的字节数一律是十进制；表格把 GB（10⁹）和 GiB（2³⁰）并列打印，因为数据手册印的是“80 GB”，
# 而大多数其他工具报告的是 GiB。激活值没有计入：有了 KV 缓存和融合的注意力，它们每个词元只有几个
# 向量（第 3 章）。

# %% [markdown]
# ### Time
#
# | field | unit | definition |
# |---|---|---|
# | `critical_batch` | tokens | the batch at which a step's matmul FLOPs, 2·B·`active_params`, take as long as reading the weights the step touches, on one chip; C · `weight_bytes` / 2W for a dense model, later for a mixture of experts (its read grows with B) |
# | `experts_touched` | experts | E · (1 − (1 − k/E)^B): the experts each MoE layer reads for B tokens routed uniformly (`null` for a dense model) |
# | `weight_bytes_read` | bytes | weight bytes one decode step reads: `param_bytes`, less the experts no token of the batch was routed to |
# | `comm_time_s` | s | one decode step's collectives (below) |
# | `chips_per_host`, `dcn_time_s` | —, s | the chips per host (`null`: one interconnect domain), and the part of `comm_time_s` spent on the data-centre network between hosts, priced under the same efficiency |
# | `step_time_lower_bound_s` | s | (copies · `kv_bytes` + `weight_bytes_read`) / (n · W): every byte read once, nothing waiting on arithmetic |
# | `step_time_s` | s | max(attention + weights, comm bandwidth time) + comm latency, where attention = max(decode attention FLOPs / nC, copies · `kv_bytes` / nW) and weights = max(2·B·`active_params` / nC, `weight_bytes_read` / nW) |
# | `tokens_per_s` | tokens/s | B / `step_time_s`, the aggregate throughput |
# | `tokens_per_s_per_user` | tokens/s | 1 / `step_time_s`, what each sequence sees |
# | `tokens_per_s_per_chip` | tokens/s | `tokens_per_s` / n, the cost of a token |
# | `prefill_time_s` | s | one forward pass over the B prompts of T tokens: max(FLOPs / nC, bytes / nW), joined to the pass's collectives like a step; FLOPs as the library's counter counts them (`counts.forward_flops`: 2 per active matmul weight per token, the full T × T attention rectangle a dense kernel computes, one row of logits per sequence), bytes the weights its B·T tokens touch plus the cache it writes |
# | `prefill_overlap` | bool | whether the prefill's collectives overlap with its work (`--prefill-overlap`, else the efficiency's choice) |
# | `ttft_s` | s | time to first token: the prefill's last logits give it, so under static batching it equals `prefill_time_s`; an engine that interleaves prefills with decode steps (chapter 11) adds queueing to it |
# | `warnings` | | the warnings of this row |
#
# The formulas are the bare roofline's (`--ideal`). Under an efficiency (below) W becomes
# `mbu` · W for the weights and the cache's own fraction of W for the cache, C becomes `mfu`
# · C, a step adds its fixed costs per layer, and where collectives do not overlap (a GPU's
# efficiency) their bandwidth time adds to the work instead of hiding behind it;
# `step_time_lower_bound_s` stays the bare bound.
#
# Decode attention FLOPs are 4·N·H per cached token per layer (a window caps a sliding layer's
# tokens); latent attention decodes in its absorbed form, 2·N·(2·R_kv + H_rope) per cached
# token per layer. Attention is memory-bound for every dense model (chapter 2), so the FLOPs
# matter only for latent attention's many heads.

# %% [markdown] tags=["lang-zh"]
# ### 时间
#
# | 字段 | 单位 | 定义 |
# |---|---|---|
# | `critical_batch` | 词元 | 一个步骤中矩阵乘法的 FLOPs（2·B·`active_params`）所需时间，恰好等于在单个芯片上读取该步骤用到的权重所需时间时的批次；稠密模型为 C · `weight_bytes` / 2W，混合专家模型则更晚（它读取的字节数随 B 增长） |
# | `experts_touched` | 专家数 | E · (1 − (1 − k/E)^B)：B 个词元均匀路由时，每个 MoE 层要读取的专家数（稠密模型为 `null`） |
# | `weight_bytes_read` | 字节 | 一个解码步骤读取的权重字节数：`param_bytes` 减去批次中没有任何词元路由到的专家 |
# | `comm_time_s` | 秒 | 一个解码步骤的集合通信（见下文） |
# | `chips_per_host`、`dcn_time_s` | —、秒 | 每台主机的芯片数（`null`：只有一个互连域），以及 `comm_time_s` 中花在主机之间数据中心网络上的部分，按同一效率估算 |
# | `step_time_lower_bound_s` | 秒 | (副本数 · `kv_bytes` + `weight_bytes_read`) / (n · W)：每个字节读取一次，不等待任何计算 |
# | `step_time_s` | 秒 | max(注意力 + 权重, 通信的带宽时间) + 通信延迟，其中注意力 = max(解码注意力的 FLOPs / nC, 副本数 · `kv_bytes` / nW)，权重 = max(2·B·`active_params` / nC, `weight_bytes_read` / nW) |
# | `tokens_per_s` | 词元/秒 | B / `step_time_s`，总吞吐量 |
# | `tokens_per_s_per_user` | 词元/秒 | 1 / `step_time_s`，每个序列看到的速度 |
# | `tokens_per_s_per_chip` | 词元/秒 | `tokens_per_s` / n，一个词元的成本 |
# | `prefill_time_s` | 秒 | 对 B 个 T 词元的提示词做一次前向计算：max(FLOPs / nC, 字节数 / nW)，与这次前向计算的集合通信的组合方式和解码步骤相同；FLOPs 按库的计数器计算（`counts.forward_flops`：每个词元对每个参与运算的矩阵权重计 2，稠密内核计算的完整 T × T 注意力矩形，每个序列一行 logits），字节数为它的 B·T 个词元用到的权重加上它写入的缓存 |
# | `prefill_overlap` | 布尔值 | 预填充的集合通信是否与它的计算重叠（`--prefill-overlap`，否则按效率的设定） |
# | `ttft_s` | 秒 | 首个词元延迟：首个词元由预填充最后的 logits 给出，所以在静态批处理下它等于 `prefill_time_s`；把预填充与解码步骤交错进行的引擎（第 11 章）还要在其上加上排队时间 |
# | `warnings` | | 这一行的警告 |
#
# 这些公式是纯屋顶线的（`--ideal`）。在某个效率之下（见下文），对权重而言 W 变为 `mbu` · W，对缓存
# 而言变为缓存自己的 W 比例，C 变为 `mfu` · C，一个步骤还要加上它每层的固定开销，集合通信不与计算
# 重叠时（GPU 的效率），它的带宽时间加在计算之上，而不是被计算掩盖；`step_time_lower_bound_s` 仍是
# 纯屋顶线的下限。
#
# 解码注意力的 FLOPs 为每层每个缓存词元 4·N·H（窗口限制滑动窗口层的词元数）；潜在注意力以吸收后
# 的形式解码，每层每个缓存词元 2·N·(2·R_kv + H_rope)。对每个稠密模型，注意力都是内存受限的（第 2 章），
# 所以只有对头数众多的潜在注意力，这些 FLOPs 才有影响。

# %% [markdown]
# ### Generation and cost
#
# | field | unit | definition |
# |---|---|---|
# | `output` | tokens | N of `--output` (`null` without it) |
# | `generation_time_s` | s | the whole generation of the batch: the prefill, then N − 1 decode steps, the i-th with T + i tokens cached (summed over at most `MAX_STEP_SAMPLES` runs of consecutive steps, each priced at its middle: `perf.generation_time`) |
# | `output_tokens_per_s` | tokens/s | B · N / `generation_time_s`: the output rate over the whole generation, prefill included |
# | `price_per_chip_hour` | $ | `--price` (`null` without it) |
# | `usd_per_million_tokens` | $ | what 10⁶ tokens cost in steady decoding: n · price · `step_time_s` / 3600 / B, times 10⁶ |
# | `usd_per_million_prompt_tokens` | $ | the same for prompt tokens: n · price · `prefill_time_s` / 3600 / (B·T), times 10⁶ |
# | `usd_per_million_output_tokens` | $ | the same over the whole generation: n · price · `generation_time_s` / 3600 / (B·N), times 10⁶ |
#
# ### Where the step goes
#
# `breakdown` (printed by `--breakdown`) gives each component of the decode step *alone*, at the
# rate the efficiency achieves. They overlap — within a part the arithmetic and the memory
# traffic take the longer of the two, and where collectives overlap their bytes hide behind
# the work — so the step is not their sum (`perf.step_breakdown`):
#
# | field | unit | definition |
# |---|---|---|
# | `weights_s` | s | the weight bytes the step reads / (n · `mbu` · W) |
# | `kv_cache_s` | s | the cache bytes it reads, at the cache's fraction of n · W |
# | `attention_s` | s | attention's FLOPs (scores, values and the Q, K, V, O projections) / (n · `mfu` · C) |
# | `mlp_s` | s | the MLP's FLOPs (dense MLPs, experts, routers) / (n · `mfu` · C), plus a mixture's routed rows (their dispatch and combine) / (n · `mbu` · W) |
# | `logits_s` | s | the unembedding's FLOPs / (n · `mfu` · C) |
# | `communication_s` | s | the collectives: bandwidth time plus latencies |
# | `dcn_s` | s | of `communication_s`, the part spent between hosts (`dcn_time_s`; 0 in one interconnect domain) |
# | `overhead_s` | s | the fixed costs per layer |
# | `step_s` | s | the step, `step_time_s` |

# %% [markdown] tags=["lang-zh"]
# ### 生成与成本
#
# | 字段 | 单位 | 定义 |
# |---|---|---|
# | `output` | 词元 | `--output` 的 N（不指定时为 `null`） |
# | `generation_time_s` | 秒 | 整个批次的完整生成：预填充，然后是 N − 1 个解码步骤，第 i 步缓存中有 T + i 个词元（对至多 `MAX_STEP_SAMPLES` 段连续步骤求和，每段按它中间那一步的耗时估算：`perf.generation_time`） |
# | `output_tokens_per_s` | 词元/秒 | B · N / `generation_time_s`：整个生成过程（含预填充）的输出速率 |
# | `price_per_chip_hour` | 美元 | `--price`（不指定时为 `null`） |
# | `usd_per_million_tokens` | 美元 | 稳定解码时 10⁶ 个词元的成本：n · 价格 · `step_time_s` / 3600 / B，再乘以 10⁶ |
# | `usd_per_million_prompt_tokens` | 美元 | 提示词词元的同一成本：n · 价格 · `prefill_time_s` / 3600 / (B·T)，再乘以 10⁶ |
# | `usd_per_million_output_tokens` | 美元 | 按整个生成过程计算的同一成本：n · 价格 · `generation_time_s` / 3600 / (B·N)，再乘以 10⁶ |
#
# ### 步骤的时间花在哪里
#
# `breakdown`（由 `--breakdown` 打印）给出解码步骤每个组成部分*单独*所需的时间，按效率所达到的速率
# 计算。它们相互重叠——在同一部分内，计算和内存访问取两者中较长的时间，集合通信与计算重叠时，
# 它的字节传输被计算掩盖——所以步骤时间不是它们的和（`perf.step_breakdown`）：
#
# | 字段 | 单位 | 定义 |
# |---|---|---|
# | `weights_s` | 秒 | 步骤读取的权重字节数 / (n · `mbu` · W) |
# | `kv_cache_s` | 秒 | 它读取的缓存字节数，按缓存的 n · W 比例计算 |
# | `attention_s` | 秒 | 注意力的 FLOPs（得分、值以及 Q、K、V、O 投影）/ (n · `mfu` · C) |
# | `mlp_s` | 秒 | MLP 的 FLOPs（稠密 MLP、专家、路由器）/ (n · `mfu` · C)，加上混合专家被路由的行（它们的分发与合并）/ (n · `mbu` · W) |
# | `logits_s` | 秒 | 反嵌入的 FLOPs / (n · `mfu` · C) |
# | `communication_s` | 秒 | 集合通信：带宽时间加上延迟 |
# | `dcn_s` | 秒 | `communication_s` 中花在主机之间的部分（即 `dcn_time_s`；只有一个互连域时为 0） |
# | `overhead_s` | 秒 | 每层的固定开销 |
# | `step_s` | 秒 | 步骤，即 `step_time_s` |

# %% [markdown]
# ## How the parts are modelled
#
# **Formats.** `--weights fp8|int8|int4` stores every matrix of the layers (attention, MLP,
# experts, latent projections) as 1-byte or half-byte codes plus one 16-bit scale per `group`
# input rows of each output column (GPTQ's and AWQ's layout); without a group fp8 and int8 keep
# one scale per output column and int4 groups 128 rows. The embedding, the unembedding, routers,
# norms and biases stay bf16, as quantization recipes leave them. `--kv int8|fp8` is the KV
# chapter's scheme (`memory.kv_quant`): one float32 scale per cached vector, 1 + 4/H bytes per
# number (1 + 4/(R_kv + H_rope) for latent attention). Arithmetic stays bfloat16.

# %% [markdown] tags=["lang-zh"]
# ## 各部分如何建模
#
# **存储格式。** `--weights fp8|int8|int4` 把各层的每个矩阵（注意力、MLP、专家、潜在投影）存为
# 1 字节或半字节的编码，再为每个输出列的每 `group` 个输入行存一个 16 位的缩放因子（GPTQ 和 AWQ 的
# 布局）；不指定 group 时，fp8 和 int8 每个输出列保留一个缩放因子，int4 则每 128 行一组。嵌入、
# 反嵌入、路由器、归一化和偏置保持 bf16，与常见的量化方案一致。`--kv int8|fp8` 是 KV 缓存一章的方案
# （`memory.kv_quant`）：每个缓存向量一个 float32 缩放因子，每个数值 1 + 4/H 字节（潜在注意力为
# 1 + 4/(R_kv + H_rope)）。计算仍然使用 bfloat16。

# %% [markdown]
# **Many chips.** The layouts' collectives are the lists of `perf.collectives`, which the
# tests hold byte for byte against the compiled programs of chapters 8–10; `perf.layout_comms`
# prices each one with ring algorithms (an AllGather, ReduceScatter or AllToAll over g chips sends
# (g − 1)/g of the array, an AllReduce twice that). Bandwidth is what one chip can put into the
# collective: on a TPU torus both directions of a ring on each axis the group spans (2 · link
# bandwidth per axis; g chips span min(torus axes, log₂ g) axes, the 2D layout's X one axis), and
# through NVLink or PCIe switches all of the chip's links. Latency is paid per pass (an AllReduce
# makes two) and grows with the group, in one function (`comm_time.collective_pass_latency`): on
# a torus, m/2 hops of `hop_latency_s` around each ring of m chips the group spans (the scaling
# book's appendix C; 16 chips on a 4 × 4 torus pay 2 + 2 hops); through a switch NCCL's ring
# model, a fixed cost plus a step per further GPU (the registry's `pass_latency_s` and
# `step_latency_s`, see the hardware table), or one message latency where the registry gives
# only that (kipply's model). Latencies never hide behind the work; bytes do in the bare
# roofline, and under a TPU's calibrated efficiency, while under a GPU's they follow it (NCCL's
# all-reduces run between the matmuls that need them); a prefill's collectives overlap or
# follow its work as `--prefill-overlap` says. The 2D layout
# splits the batch over X·Z chips for attention and needs B divisible by it. A mixture of
# experts is split like a dense MLP, or over Z groups by the expert-parallel layout, whose
# AllToAlls send each token to its experts and back; the automatic choice tries both. Latent
# attention is split by heads (1D only): data-parallel attention, which serving systems use for
# DeepSeek, is not modelled. One interconnect domain at most (an HGX board's 8 GPUs, a TPU pod),
# unless the chips are spread over hosts.
#
# **Many hosts.** With `--chips-per-host H` the mesh's chips are numbered row by row (its last
# axis fastest) and each host holds H consecutive ones, as a multi-process JAX job lays them out
# (chapter 10's "From one host to a pod"). A collective whose g chips span m hosts, h on each,
# runs hierarchically (`perf.dcn_comms`): an AllReduce reduce-scatters inside each host,
# all-reduces the 1/h share between hosts and all-gathers inside again; an AllGather or a
# ReduceScatter does its network half on the 1/h share; an AllToAll sends the (g − h)/g of its
# array bound for other hosts over the network. One chip then sends (m − 1)/m · A/h bytes over
# the data-centre network per AllGather or ReduceScatter of A bytes (twice that per AllReduce),
# and the in-host and network bytes add up to the flat ring's (g − 1)/g · A. The phases run one
# after another: the in-host ones are priced as above, the network ones at `dcn_bytes_per_s`
# (one chip's share of its server's NICs) plus, per pass, the latency the same function gives
# between hosts, (m − 1) · `dcn_latency_s` (a ring step over the network each). Every phase's
# passes count as the layout's passes, so the efficiency applies to the network as to the
# interconnect: its link fraction to the network's bandwidth time, its software cost to each
# network pass. The 2D layout's X axis comes first, and the expert-parallel layout's Z, so their
# groups are the first to leave a host; only the layouts (and splits) that line up with whole
# hosts are considered.

# %% [markdown] tags=["lang-zh"]
# **多芯片。** 各布局的集合通信就是 `perf.collectives` 中的列表，测试逐字节地将它们与第 8–10 章
# 编译出的程序核对；`perf.layout_comms` 用环形算法估算每一项的耗时（在 g 个芯片上做一次全收集、规约散射
# 或全交换，发送数组的 (g − 1)/g，全规约再乘以 2）。带宽指单个芯片能投入这次集合通信的带宽：在 TPU
# 环面上，是该组所跨的每个轴上环的两个方向（每轴 2 · 链路带宽；g 个芯片跨越 min(环面轴数, log₂ g)
# 个轴，二维布局的 X 占一个轴）；通过 NVLink 或 PCIe 交换机时，则是该芯片的全部链路。延迟按趟计
# （一次全规约要走两趟），并随组的大小增长，由一个函数（`comm_time.collective_pass_latency`）建模：
# 在环面上，该组所跨的每个 m 芯片环走 m/2 跳，每跳 `hop_latency_s`（《How to Scale Your Model》的附录 C；4 × 4
# 环面上的 16 个芯片要走 2 + 2 跳）；经过交换机时用 NCCL 的环形模型，即一个固定开销再加上每多一块
# GPU 的一步（注册表中的 `pass_latency_s` 和 `step_latency_s`，见硬件表），注册表只给出消息延迟时
# 则是一次消息延迟（kipply 的模型）。延迟从不被计算掩盖；字节传输在纯屋顶线中以及 TPU 的校准效率
# 下与计算重叠，在 GPU 的校准效率下则排在计算之后（NCCL 的全规约在需要它的矩阵乘法之间运行）；预填充
# 的集合通信与它的计算重叠还是排在其后，由 `--prefill-overlap` 决定。二维布局在注意力中把批次切分到 X·Z 个
# 芯片上，要求 B 能被它整除。混合专家的切分方式与稠密 MLP 相同，或者由专家并行布局切分到 Z 组上，
# 它的全交换把每个词元送到它的专家那里再送回来；自动选择两者都会尝试。潜在注意力按注意力头切分
# （仅一维）：推理服务系统为 DeepSeek 使用的数据并行注意力没有建模。最多一个互连域（一块 HGX 板上的
# 8 块 GPU，或一个 TPU pod），除非把芯片分布到多台主机上。
#
# **多台主机。** 使用 `--chips-per-host H` 时，网格的芯片按行编号（最后一个轴变化最快），每台主机
# 持有连续的 H 个芯片，这正是多进程 JAX 作业排布它们的方式（第 10 章的“从一台主机到一个 pod”）。
# 一个跨越 m 台主机、每台 h 个芯片、共 g 个芯片的集合通信按层次执行（`perf.dcn_comms`）：全规约先在
# 每台主机内做规约散射，再在主机之间对 1/h 的份额做全规约，最后在主机内做全收集；全收集或规约散射
# 只对 1/h 的份额走网络那一半；全交换把其数组中发往其他主机的 (g − h)/g 经网络发送。于是每做一次
# A 字节的全收集或规约散射，单个芯片经数据中心网络发送 (m − 1)/m · A/h 字节（全规约再乘以 2），主机内
# 与网络上的字节数相加正好等于扁平环的 (g − 1)/g · A。各阶段依次进行：主机内的阶段按上文估算，网络
# 上的阶段按 `dcn_bytes_per_s`（单个芯片分得的服务器网卡带宽）计，每趟再加上同一个函数给出的主机间
# 延迟 (m − 1) · `dcn_latency_s`（每一步是网络上的一次环形传递）。每个阶段的趟数都计入布局的趟数，
# 所以效率对网络与对互连一样适用：链路比例作用于网络的带宽时间，软件开销作用于每一趟网络传输。二维
# 布局的 X 轴排在最前，专家并行布局的 Z 也是，所以它们的组最先离开主机；只考虑与整台主机对齐的布局
# （以及切分）。

# %% [markdown]
# **Mixtures of experts.** Routing is taken as balanced: each token picks k distinct experts,
# each expert with probability k/E, independently of other tokens. Skewed routing touches fewer
# experts for the same average, so `experts_touched` and the step's weight read are upper bounds.
# Each token's k (token, expert) pairs are rows of D activations that a routing layer moves
# {glue:text}`ref_routed_passes` times (written sorted by expert, read by the experts, their outputs written, read back to be
# combined), on every chip that works on them: all B · k of them on each chip of the 1D layout,
# whose slice of every expert needs every row, and B · k / Z on each chip of the expert-parallel
# layout. In the 1D layout this traffic grows with the batch on every chip, however many chips.

# %% [markdown] tags=["lang-zh"]
# **混合专家。** 路由被视为均衡的：每个词元挑选 k 个不同的专家，每个专家被选中的概率为 k/E，与其他
# 词元无关。偏斜的路由在平均值相同时触及的专家更少，所以 `experts_touched` 和步骤读取的权重字节数都是
# 上界。每个词元的 k 个（词元，专家）对各是一行 D 个激活值，一个路由层要把它们在内存中搬运 {glue:text}`ref_routed_passes` 次（按专家
# 排序后写入、由专家读取、写出专家的输出、读回来加权合并），而且每个处理它们的芯片都要搬运：1D 布局中
# 每个芯片都持有每个专家的一片，需要全部 B · k 行；专家并行布局中每个芯片只处理 B · k / Z 行。所以在
# 1D 布局中，这部分流量在每个芯片上都随批次增长，与芯片数无关。

# %% [markdown]
# **Efficiency.** Under `--ideal` every part of a step pays its bare roofline. By default
# each pays it at the fractions a real serving stack reaches (`perf.efficiency`): weights at
# `mbu` · W (times a factor for weights stored in int8 or int4 and dequantized as they are
# read), the cache at its own fraction of W, matmuls at `mfu` · C (a mixture's routed experts
# at a further factor), collectives at a fraction of the link's bandwidth with a software cost
# per pass on top of the hardware's latency; and each layer of a decode step, of a prefill and
# of a mixture's routing pays a fixed cost (launches, small operations). The values are the
# least-squares fit of `inferbook calibrate` to the fit split of the published measurements
# (`book/data/published/`), per chip or group of chips, with the fit's date and points in
# `perf.efficiency_defaults`; a chip without published points takes those of the chip it is
# closest to and says so. `--mbu` and `--mfu` replace one fraction and keep the rest.
# Chapter 3's "How good is the estimate?" holds the result against the points the fit never
# saw.
#
# **What is left out.** Activations in memory; the time to ship a prompt's cache between
# servers (chapter 11's `phase_time`); speculative decoding (chapter 13); an engine's
# scheduling (the generation is a static batch: every sequence prefills, then decodes
# together).

# %% [markdown] tags=["lang-zh"]
# **效率。** 使用 `--ideal` 时，步骤的每一部分都按纯屋顶线计时。默认情况下，每一部分按真实推理服务
# 软件栈达到的比例计时（`perf.efficiency`）：权重按 `mbu` · W 读取（以 int8 或 int4 存储、边读边
# 反量化的权重再乘一个系数），缓存按它自己的 W 比例读取，矩阵乘法按 `mfu` · C 计算（混合专家的路由
# 专家再乘一个系数），集合通信按链路带宽的一个比例传输，并在硬件延迟之上每趟再加一份软件开销；解码
# 步骤、预填充以及混合专家路由的每一层还要付一份固定开销（内核启动、小操作）。这些值是
# `inferbook calibrate` 对已发布测量结果（`book/data/published/`）中拟合部分做最小二乘拟合的结果，
# 按芯片或芯片组给出，拟合的日期和所用数据点记在 `perf.efficiency_defaults` 中；没有已发布数据点的
# 芯片借用与它最接近的芯片的数值，并注明这一点。`--mbu` 和 `--mfu` 替换其中一个比例，其余不变。
# 第 3 章的“估算有多准？”用拟合从未见过的数据点检验这个结果。
#
# **没有计入的部分。** 内存中的激活值；在服务器之间传送一个提示词的缓存所需的时间（第 11 章的
# `phase_time`）；推测解码（第 13 章）；引擎的调度（生成过程按静态批次进行：每个序列先预填充，然后一起
# 解码）。

# %% [markdown]
# ## Beside other estimators
#
# Two open estimators answer the same questions: llm-analysis {cite:p}`li2023llmanalysis` and
# GenZ {cite:p}`bambhaniya2024genz`. Neither is a dependency of the book. Each was installed
# into a throwaway environment, at the version named in the table's header, and asked at its
# own defaults, as its documentation says, for the generation rate of some of the published
# measurements (`tests/peer_estimators.py` says how each tool's answer becomes a rate); their
# answers are kept in `book/data/peer_estimators.json` with the calls that gave them. Beside
# them, `inferbook estimate` twice: the bare roofline (`--ideal`) and its calibrated default.
# Each cell is the predicted rate and, in brackets, the factor by which it misses the
# measured one; a tool that refused the case says so.

# %% [markdown] tags=["lang-zh"]
# ## 与其他估算器对比
#
# 另有两个开源估算器回答同样的问题：llm-analysis {cite:p}`li2023llmanalysis` 和 GenZ
# {cite:p}`bambhaniya2024genz`。它们都不是本书的依赖。我们把它们各自安装到一个用完即弃的环境中（版本
# 见表头），按其文档的说法、使用其自身的默认设置，让它们估算部分已发布测量结果的生成速率
# （`tests/peer_estimators.py` 说明了如何把每个工具的回答换算成速率）；它们的回答连同给出回答的调用
# 一起保存在 `book/data/peer_estimators.json` 中。与之并列的是 `inferbook estimate` 的两种视角：纯屋顶线
# （`--ideal`）和它默认的校准结果。每一格是预测的速率，括号中是它偏离测量值的倍数；拒绝某个情形的
# 工具会注明这一点。

# %% tags=["remove-input"]
import math

from IPython.display import Markdown

from inferbook.book import bookdata
from inferbook.book.present import fmt_ratio, glue
from inferbook.perf.estimate_steps import ROUTED_ROW_PASSES
from inferbook.perf.published_baseline import predict
from inferbook.perf.published_points import load_points

peers = bookdata.load("peer_estimators.json")
points = {p.id: p for p in load_points()}
tools = {"llm_analysis": f"llm-analysis {peers['versions']['llm-analysis']}",
         "genz": f"GenZ {peers['versions']['genz-llm']}",
         "ideal": "inferbook --ideal", "calibrated": "inferbook (calibrated)"}


def miss(predicted: float, measured: float) -> float:
    """The factor by which a prediction misses: max(p/m, m/p)."""
    return max(predicted / measured, measured / predicted)


table = ["| published point | split | measured | " + " | ".join(tools.values()) + " |",
         "|---|---|---|" + "---|" * len(tools)]
answers = {tool: [] for tool in tools}      # (predicted, measured) per answered case
for row in peers["rows"]:
    p = points[row["id"]]
    assert row["measured"] == p.value and row["quantity"] == p.quantity
    got = {"llm_analysis": row["llm_analysis"], "genz": row["genz"],
           "ideal": predict(p, "ideal")[0], "calibrated": predict(p, "calibrated")[0]}
    cells = []
    for tool, value in got.items():
        if value is None:
            cells.append("refused")
            continue
        answers[tool].append((value, p.value))
        cells.append(f"{value:,.0f} ({fmt_ratio(miss(value, p.value), 2)})")
    table.append(f"| {p.id} | {p.split} | {p.value:,.0f} | " + " | ".join(cells) + " |")
typical = {tool: math.exp(sum(math.log(miss(v, m)) for v, m in pairs) / len(pairs))
           for tool, pairs in answers.items()}
table.append("| typical factor (geometric mean) | | | "
             + " | ".join(fmt_ratio(typical[t], 2) for t in tools) + " |")
Markdown("\n".join(table))

# %% tags=["remove-input"]
dense_a100 = [r for r in peers["rows"] if "a100" in r["id"] and "mixtral" not in r["id"]]
bare = ("llm_analysis", "genz")
# Every bare roofline, ours included, promises more than the dense A100 runs achieved.
assert all(r[t] > r["measured"] for r in dense_a100 for t in bare)
assert all(predict(points[r["id"]], "ideal")[0] > r["measured"] for r in dense_a100)
mixtral = next(r for r in peers["rows"] if "mixtral" in r["id"])
assert mixtral["llm_analysis"] < mixtral["measured"] < mixtral["genz"]
refused = [r for r in peers["rows"] if r["genz"] is None]
assert [predict(points[r["id"]], "calibrated")[1] for r in refused] == [True] * len(refused)
held = [r for r in peers["rows"] if points[r["id"]].split == "held_out"]
glue("ref_peer_cases", str(len(peers["rows"])))
glue("ref_routed_passes", str(ROUTED_ROW_PASSES))
glue("ref_peer_held", str(len(held)))
glue("ref_peer_mixtral_la", fmt_ratio(mixtral["measured"] / mixtral["llm_analysis"], 1))
for tool in tools:
    glue(f"ref_peer_{tool}", fmt_ratio(typical[tool], 2))

# %% [markdown]
# On every dense A100 run each of the three bare rooflines promises more than was achieved:
# none of them charges what a real step pays beyond reading and computing (typical factors:
# llm-analysis {glue:text}`ref_peer_llm_analysis`, GenZ {glue:text}`ref_peer_genz`, `--ideal`
# {glue:text}`ref_peer_ideal`; calibrated {glue:text}`ref_peer_calibrated`). Where they part,
# it is over what a step reads and holds: for Mixtral llm-analysis predicts
# {glue:text}`ref_peer_mixtral_la` too slow a rate and GenZ too fast a one, and for the fp8 run
# at batch 120 GenZ counts a cache too large for the chip and refuses, where the run itself
# (and the estimator's count) fits. Read the calibrated column with its split: of these
# {glue:text}`ref_peer_cases` points only {glue:text}`ref_peer_held` are held out; the others
# were in the fit, so its error there is no test. Chapter 3's "How
# good is the estimate?" gives the honest one, on every held-out point.

# %% [markdown] tags=["lang-zh"]
# 在每一次稠密模型的 A100 运行上，三种纯屋顶线给出的速度都高于实际达到的：它们都不计入真实步骤在读取
# 和计算之外要付的代价（典型倍数：llm-analysis {glue:text}`ref_peer_llm_analysis`，GenZ
# {glue:text}`ref_peer_genz`，`--ideal` {glue:text}`ref_peer_ideal`；校准后
# {glue:text}`ref_peer_calibrated`）。它们的分歧在于一个步骤读取和持有什么：对 Mixtral，llm-analysis
# 预测的速率慢了 {glue:text}`ref_peer_mixtral_la`，GenZ 则偏快；对批次为 120 的 fp8 运行，GenZ 算出的
# 缓存超出芯片容量而拒绝估算，而这次运行本身（以及估算器的计算）都放得下。校准列要结合它的数据划分来读：
# 这 {glue:text}`ref_peer_cases` 个数据点中只有 {glue:text}`ref_peer_held` 个是留出的；其余的参与了
# 拟合，所以在那里的误差算不上检验。第 3 章的“估算有多准？”在每一个留出的数据点上给出如实的误差。
