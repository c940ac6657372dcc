"""Small GGUF files for the tests, written with the `gguf` package's own writer.

`write_gguf` saves a library params pytree the way llama.cpp's converter would: llama.cpp's
tensor names, matrices as [out, in] rows, the query and key rows of the ``llama``
architecture permuted into llama.cpp's order (`llama_cpp_row_order`, written here from the
converter's description, independently of the library's inverse), each matrix stored in the
type asked for. Types gguf-py can quantize are quantized from the weights; the K-quants, which
it cannot, are filled with random blocks of sane scales — their decoding is what is tested.

The tokenizer is a small byte-level BPE vocabulary: the 256 byte stand-ins, a few merges,
and ChatML's control tokens, with a ChatML chat template.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from inferbook.model.config import ModelConfig

T = gguf.GGMLQuantizationType
RANDOM_BLOCK_TYPES = ("Q4_K", "Q6_K")
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "r e", "o n", "i s", "Ġ is", "P a", "Pa r",
          "Par is", "Ġ Paris"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] "
                 "+ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes, in byte order (written out here, not
    taken from the library)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def vocabulary() -> tuple[list[str], list[int]]:
    """Tokens and their llama.cpp types: control tokens, bytes, merged tokens."""
    tokens = list(CONTROL) + byte_alphabet()
    for merge in MERGES:
        joined = merge.replace(" ", "")
        if joined not in tokens:
            tokens.append(joined)
    types = [3] * len(CONTROL) + [1] * (len(tokens) - len(CONTROL))
    return tokens, types


VOCAB_SIZE = len(vocabulary()[0])


def llama_cpp_row_order(rows: int, heads: int) -> np.ndarray:
    """The row order llama.cpp's converter gives a query or key projection: within each head of
    H rows, new row 2i is old row i and new row 2i + 1 is old row H/2 + i."""
    H = rows // heads
    order = []
    for h in range(heads):
        for i in range(H // 2):
            order += [h * H + i, h * H + H // 2 + i]
    return np.array(order)


def _hf_tensors(cfg: ModelConfig, params: dict, arch: str) -> dict[str, np.ndarray]:
    """llama.cpp name -> array in ggml's row layout ([out, in] for matrices)."""
    out = {"token_embd.weight": np.asarray(params["embed"], np.float32),
           "output_norm.weight": np.asarray(params["final_norm"], np.float32)}
    if "unembed" in params:
        out["output.weight"] = np.asarray(params["unembed"], np.float32).T
    names = {"attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
             "wv": "attn_v.weight", "wo": "attn_output.weight", "bq": "attn_q.bias",
             "bk": "attn_k.bias", "bv": "attn_v.bias", "mlp_norm": "ffn_norm.weight",
             "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
             "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"}
    for i, layer in enumerate(params["layers"]):
        for lib, w in layer.items():
            w = np.asarray(w, np.float32)
            w = w.T if w.ndim == 2 else w
            heads = {"wq": cfg.N, "bq": cfg.N, "wk": cfg.K, "bk": cfg.K}.get(lib)
            if arch == "llama" and heads is not None:
                w = w[llama_cpp_row_order(w.shape[0], heads)]
            out[f"blk.{i}.{names[lib]}"] = np.ascontiguousarray(w)
    return out


def _random_blocks(qtype: str, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    block, size = gguf.GGML_QUANT_SIZES[T[qtype]]
    raw = rng.integers(0, 256, (rows, cols // block, size), dtype=np.uint8)
    scale_at = {"Q4_K": (0, 2), "Q6_K": (size - 2,)}[qtype]      # the f16 scales' offsets
    for at in scale_at:
        d = rng.uniform(-0.004, 0.004, (rows, cols // block)).astype(np.float16)
        raw[..., at:at + 2] = d.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, -1)


def write_gguf(path: Path, cfg: ModelConfig, params: dict, qtype: str = "F32", *,
               arch: str = "llama", tokenizer: bool = True, seed: int = 0,
               template: str | None = CHAT_TEMPLATE, eos: str = "<|im_end|>",
               pre: str = "gpt2", extra: dict[str, np.ndarray] | None = None) -> Path:
    """Write `params` as a GGUF file whose matrices are all of type `qtype`."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_block_count(cfg.L)
    w.add_context_length(cfg.max_seq_len)
    w.add_embedding_length(cfg.D)
    w.add_feed_forward_length(cfg.F)
    w.add_head_count(cfg.N)
    w.add_head_count_kv(cfg.K)
    w.add_key_length(cfg.H)
    w.add_value_length(cfg.H)
    w.add_rope_dimension_count(cfg.H)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_vocab_size(cfg.V)
    if tokenizer:
        tokens, types = vocabulary()
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(MERGES)
        w.add_bos_token_id(tokens.index("<|im_start|>"))
        w.add_eos_token_id(tokens.index(eos))
        w.add_add_bos_token(False)
        if template is not None:
            w.add_chat_template(template)
    for name, array in (extra or {}).items():
        w.add_tensor(name, array)
    for name, array in _hf_tensors(cfg, params, arch).items():
        if array.ndim == 1 or qtype == "F32":
            w.add_tensor(name, array.astype(np.float32))
        elif qtype == "F16":
            w.add_tensor(name, array.astype(np.float16))
        elif qtype in RANDOM_BLOCK_TYPES:
            w.add_tensor(name, _random_blocks(qtype, *array.shape, rng), raw_dtype=T[qtype])
        else:
            w.add_tensor(name, gguf.quants.quantize(array, T[qtype]), raw_dtype=T[qtype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def set_tensor_type(path: Path, name: str, type_id: int) -> None:
    """Overwrite the type of tensor `name` in the file's tensor table (to make bad files)."""
    data = bytearray(path.read_bytes())
    key = len(name).to_bytes(8, "little") + name.encode()
    at = data.index(key) + len(key)
    n_dims = int.from_bytes(data[at:at + 4], "little")
    at += 4 + 8 * n_dims
    data[at:at + 4] = type_id.to_bytes(4, "little")
    path.write_bytes(bytes(data))
