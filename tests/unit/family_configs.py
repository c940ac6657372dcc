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
                           tied_embeddings=True, norm_position="both", query_scale=0.2,
                           attn_softcap=5.0, final_softcap=3.0, window=3,
                           layer_types=("sliding", "full")),
    "gemma3": BASE.replace(norm_plus_one=True, embed_scale=True, activation="gelu_tanh",
                           tied_embeddings=True, norm_position="both", qk_norm=True,
                           query_scale=0.2, window=3, layer_types=("sliding", "full"),
                           local_rope_theta=1e4, rope_theta=1e6,
                           rope_scaling=RopeScaling("linear", factor=2.0)),
    "olmo2": BASE.replace(norm_position="post", qk_norm=True, qk_norm_scope="whole"),
    "smollm3": BASE.replace(nope_layers=(1,), window=3, layer_types=("full", "sliding")),
    "gpt_neox": BASE.replace(K=4, mlp="plain", activation="gelu", norm="layer",
                             residual="parallel", rotary_fraction=0.25, qkv_bias=True,
                             o_bias=True, mlp_bias=True),
    "stablelm": BASE.replace(norm="layer", residual="parallel", shared_norm=True,
                             rotary_fraction=0.25, qkv_bias=True, qk_norm=True,
                             qk_norm_scope="each_head", qk_norm_kind="layer_no_bias"),
    "granite": BASE.replace(embed_multiplier=3.0, residual_multiplier=0.5, query_scale=0.2,
                            logit_multiplier=0.25),
    "cohere": BASE.replace(norm="layer_no_bias", residual="parallel", shared_norm=True,
                           rope_interleaved=True, qk_norm=True, qk_norm_scope="each_head",
                           logit_multiplier=0.5, tied_embeddings=True),
    "olmoe": BASE.replace(qk_norm=True, qk_norm_scope="whole", qkv_clip=1.0,
                          moe=MoE(E=4, k=2, F=16, renormalize=False)),
    "starcoder2": BASE.replace(norm="layer", mlp="plain", activation="gelu_tanh", window=3,
                               qkv_bias=True, o_bias=True, mlp_bias=True, tied_embeddings=True),
    "phi": BASE.replace(K=4, norm="layer", mlp="plain", activation="gelu_tanh",
                        residual="parallel", shared_norm=True, rotary_fraction=0.5,
                        qkv_bias=True, o_bias=True, mlp_bias=True, unembed_bias=True,
                        qk_norm=True),
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
