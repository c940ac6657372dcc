"""Tiny `ModelConfig`s with each family's features on, for tests that need no transformers.

(hf_families.py builds the same families with transformers, for the parity tests.)
"""

from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA, MoE, RopeScaling

BASE = ModelConfig(L=2, D=32, F=48, N=4, K=2, H=8, V=64, max_seq_len=64)

FAMILY_CONFIGS = {
    "llama3": BASE.replace(tied_embeddings=True, rope_scaling=RopeScaling(
        "llama3", factor=8.0, original_max_len=16)),
    "mistral": BASE.replace(window=3, rope_scaling=RopeScaling("linear", factor=2.0)),
    "qwen2": BASE.replace(qkv_bias=True, window=3, layer_types=("full", "sliding"),
                          rope_scaling=RopeScaling("yarn", factor=4.0, original_max_len=8)),
    "qwen3": BASE.replace(qk_norm=True, H=12),
    "gemma": BASE.replace(norm_plus_one=True, embed_scale=True, activation="gelu_tanh",
                          tied_embeddings=True),
    "gemma2": BASE.replace(norm_plus_one=True, embed_scale=True, activation="gelu_tanh",
                           tied_embeddings=True, sandwich_norm=True, query_scale=0.2,
                           attn_softcap=5.0, final_softcap=3.0, window=3,
                           layer_types=("sliding", "full")),
    "gpt2": BASE.replace(K=4, mlp="plain", activation="gelu_tanh", norm="layer",
                         positions="learned", qkv_bias=True, o_bias=True, mlp_bias=True,
                         tied_embeddings=True),
    "mixtral": BASE.replace(moe=MoE(E=4, k=2, F=16)),
    "qwen2_moe": BASE.replace(qkv_bias=True, moe=MoE(E=6, k=2, F=16, shared_F=24,
                                                     shared_gate=True, renormalize=False,
                                                     dense_layers=(0,))),
    "deepseek_v2": BASE.replace(K=4, H=12, rope_interleaved=True, query_scale=0.25,
                                mla=MLA(R_kv=16, H_nope=8, H_rope=4, H_v=8),
                                moe=MoE(E=8, k=2, F=16, shared_F=16, renormalize=False,
                                        routed_scale=2.0, groups=4, topk_groups=2,
                                        dense_layers=(0,))),
    "deepseek_v3": BASE.replace(K=4, H=12, rope_interleaved=True,
                                mla=MLA(R_kv=16, R_q=12, H_nope=8, H_rope=4, H_v=8),
                                moe=MoE(E=8, k=2, F=16, shared_F=16, scoring="sigmoid",
                                        score_bias=True, routed_scale=2.5, groups=4,
                                        topk_groups=2)),
}
