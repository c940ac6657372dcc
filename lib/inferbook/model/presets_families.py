"""Presets of the model families readers serve today, read from their published configs.

Each entry holds the keys of the model's ``config.json`` on the Hugging Face hub that decide
a size, a FLOP or a byte (the repository is named beside it), and goes through the same
reader as a downloaded file (`hf_config.from_hf_config`), so a preset and
``inferbook estimate --config <that file>`` can never disagree. Keys that change nothing the
book computes (token ids, dtypes, dropout, training losses) are left out.
"""

from __future__ import annotations

from inferbook.model.config import ModelConfig
from inferbook.model.hf_config import from_hf_config

__all__ = ["FAMILY_CONFIGS", "family_presets"]

_LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


def _llama(D: int, F: int, L: int, N: int, **extra) -> dict:
    """Meta's Llama 3.1 / 3.2: GQA with 8 KV heads, 128k vocabulary, llama3 rope scaling."""
    return {"model_type": "llama", "hidden_size": D, "intermediate_size": F,
            "num_hidden_layers": L, "num_attention_heads": N, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0, "rope_scaling": _LLAMA3_ROPE,
            "tie_word_embeddings": False, **extra}


_GEMMA3_GLOBAL_ROPE = {"rope_type": "linear", "factor": 8.0}


def _gemma3(D: int, F: int, L: int, N: int, K: int, **extra) -> dict:
    """Google's Gemma-3 language models (the keys their configs share, written out)."""
    return {"model_type": "gemma3_text", "hidden_size": D, "intermediate_size": F,
            "num_hidden_layers": L, "num_attention_heads": N, "num_key_value_heads": K,
            "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072,
            "sliding_window": 1024, "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rms_norm_eps": 1e-6,
            "hidden_activation": "gelu_pytorch_tanh", **extra}


FAMILY_CONFIGS: dict[str, dict] = {
    # meta-llama/Llama-3.1-8B, -70B, -405B (Grattafiori et al. 2024).
    "llama-3.1-8b": _llama(4096, 14336, 32, 32),
    "llama-3.1-70b": _llama(8192, 28672, 80, 64),
    "llama-3.1-405b": _llama(16384, 53248, 126, 128),
    # meta-llama/Llama-3.2-1B and -3B: the output tied to the embedding, rope factor 32.
    # Llama-3.2-1B is the GPU benchmark's model.
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, head_dim=64, tie_word_embeddings=True,
                           rope_scaling={**_LLAMA3_ROPE, "factor": 32.0}),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, head_dim=128, tie_word_embeddings=True,
                           rope_scaling={**_LLAMA3_ROPE, "factor": 32.0}),
    # Qwen/Qwen2.5-7B: biases on q, k and v; no sliding window in use.
    "qwen2.5-7b": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
                   "num_hidden_layers": 28, "num_attention_heads": 28,
                   "num_key_value_heads": 4, "vocab_size": 152064,
                   "max_position_embeddings": 131072, "rope_theta": 1000000.0,
                   "tie_word_embeddings": False, "use_sliding_window": False},
    # Qwen/Qwen3-8B: q/k RMSNorm, head_dim 128 set apart from hidden_size / heads.
    "qwen3-8b": {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                 "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
                 "rope_theta": 1000000.0, "tie_word_embeddings": False},
    # Qwen/Qwen3-32B: Qwen3-8B's design at 64 layers of width 5120 (64 query heads on 8 KV
    # heads of 128); the TPU v6e decode measurements of book/data/published serve it.
    "qwen3-32b": {"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 25600,
                  "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
                  "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
                  "rope_theta": 1000000.0, "tie_word_embeddings": False},
    # Qwen/Qwen3-30B-A3B: 128 experts of width 768 per layer, 8 per token.
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "hidden_size": 2048,
                      "intermediate_size": 6144, "moe_intermediate_size": 768,
                      "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True,
                      "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "num_hidden_layers": 48, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                      "max_position_embeddings": 40960, "rope_theta": 1000000.0,
                      "tie_word_embeddings": False},
    # mistralai/Mixtral-8x7B-v0.1 (Jiang et al. 2024): 8 experts of Mistral-7B's MLP, 2 each.
    "mixtral-8x7b": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_local_experts": 8, "num_experts_per_tok": 2,
                     "num_hidden_layers": 32, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "vocab_size": 32000,
                     "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                     "rms_norm_eps": 1e-5, "sliding_window": None,
                     "tie_word_embeddings": False},
    # google/gemma-2-9b (Gemma Team 2024): local (4,096-token window) and global layers
    # alternate; four norms per layer; the output tied to the embedding.
    "gemma-2-9b": {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                   "num_hidden_layers": 42, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
                   "max_position_embeddings": 8192, "sliding_window": 4096,
                   "query_pre_attn_scalar": 256, "attn_logit_softcapping": 50.0,
                   "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"},
    # microsoft/Phi-3-mini-4k-instruct: multi-head attention, a 2,047-token window.
    "phi-3-mini": {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
                   "num_hidden_layers": 32, "num_attention_heads": 32,
                   "num_key_value_heads": 32, "vocab_size": 32064,
                   "max_position_embeddings": 4096, "sliding_window": 2047,
                   "rms_norm_eps": 1e-5, "tie_word_embeddings": False},
    # deepseek-ai/DeepSeek-V2-Lite (DeepSeek-AI 2024): latent attention (a 512-number latent
    # and a 64-number rotary key per token), 64 experts, 6 per token, 2 shared, one dense layer.
    "deepseek-v2-lite": {"model_type": "deepseek_v2", "hidden_size": 2048,
                         "intermediate_size": 10944, "moe_intermediate_size": 1408,
                         "n_routed_experts": 64, "n_shared_experts": 2,
                         "num_experts_per_tok": 6, "first_k_dense_replace": 1,
                         "topk_method": "greedy", "norm_topk_prob": False,
                         "num_hidden_layers": 27, "num_attention_heads": 16,
                         "num_key_value_heads": 16, "kv_lora_rank": 512, "q_lora_rank": None,
                         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
                         "vocab_size": 102400, "max_position_embeddings": 163840,
                         "tie_word_embeddings": False,
                         "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32,
                                          "beta_slow": 1, "mscale": 0.707,
                                          "mscale_all_dim": 0.707,
                                          "original_max_position_embeddings": 4096}},
    # deepseek-ai/DeepSeek-V3 (DeepSeek-AI 2024): 256 experts, 8 per token in 4 of 8 groups,
    # sigmoid scores with a bias, three dense layers, queries through a rank-1,536 latent.
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_size": 7168,
                    "intermediate_size": 18432, "moe_intermediate_size": 2048,
                    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                    "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
                    "routed_scaling_factor": 2.5, "norm_topk_prob": True,
                    "first_k_dense_replace": 3, "num_hidden_layers": 61,
                    "num_attention_heads": 128, "num_key_value_heads": 128,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                    "max_position_embeddings": 163840, "tie_word_embeddings": False,
                    "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32,
                                     "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
                                     "original_max_position_embeddings": 4096}},
    # google/gemma-3-1b-pt, gemma-3-4b-it, gemma-3-27b-it (Gemma Team 2025): five local layers
    # (a 512- or 1,024-token window, rotary base 10,000) to each global one (base 1,000,000,
    # stretched 8× linearly in 4B and 27B); q/k norms; the output tied to the embedding. The
    # 4B and 27B files are multimodal: these are their language models.
    "gemma-3-1b": _gemma3(1152, 6912, 26, 4, 1, vocab_size=262144,
                          max_position_embeddings=32768, sliding_window=512),
    "gemma-3-4b": _gemma3(2560, 10240, 34, 8, 4, rope_scaling=_GEMMA3_GLOBAL_ROPE),
    "gemma-3-27b": _gemma3(5376, 21504, 62, 32, 16, head_dim=128, query_pre_attn_scalar=168,
                           rope_scaling=_GEMMA3_GLOBAL_ROPE),
    # allenai/OLMo-2-1124-7B (OLMo et al. 2024): norms after attention and MLP, q/k norms
    # over the whole projection.
    "olmo-2-7b": {"model_type": "olmo2", "hidden_size": 4096, "intermediate_size": 11008,
                  "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 32, "vocab_size": 100352,
                  "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
                  "rope_theta": 500000.0, "tie_word_embeddings": False},
    # HuggingFaceTB/SmolLM3-3B: GQA with every fourth layer's positions removed (NoPE).
    "smollm3-3b": {"model_type": "smollm3", "hidden_size": 2048, "intermediate_size": 11008,
                   "num_hidden_layers": 36, "num_attention_heads": 16,
                   "num_key_value_heads": 4, "vocab_size": 128256,
                   "max_position_embeddings": 65536, "rope_theta": 5000000.0,
                   "no_rope_layer_interval": 4, "use_sliding_window": False},
    # EleutherAI/pythia-1b (Biderman et al. 2023): GPT-NeoX, parallel attention and MLP, a
    # quarter of each head rotated.
    "pythia-1b": {"model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192,
                  "num_hidden_layers": 16, "num_attention_heads": 8, "vocab_size": 50304,
                  "max_position_embeddings": 2048, "rotary_pct": 0.25,
                  "rotary_emb_base": 10000, "use_parallel_residual": True,
                  "tie_word_embeddings": False},
    # openai-community/gpt2 (Radford et al. 2019): learned positions, LayerNorm, biases.
    "gpt2": {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12,
             "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new"},
}


def family_presets() -> dict[str, ModelConfig]:
    """The configs above as `ModelConfig`s, named by their keys."""
    return {name: from_hf_config(raw, name=name) for name, raw in FAMILY_CONFIGS.items()}
