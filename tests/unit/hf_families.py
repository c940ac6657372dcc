"""Tiny random models of every supported family, built and saved by Hugging Face transformers.

Each entry gives the transformers classes and config keys of a family, chosen so that the
family's own features are on: rotary scaling rules, biases, q/k norms, fused tensors,
soft-capping, sandwich norms, sliding windows shorter than prompt + generation, experts with
shared experts and group-limited routing, latent attention with and without a query latent,
learned positions, partial rotary widths, NoPE layers, parallel branches, norms after the
branches, q/k norms of every scope, multipliers, two rotary bases. Weights are redrawn at
unit scale (Hugging Face's std 0.02 makes every logit nearly equal, so greedy decoding would
be a coin toss between near-ties), and norm gains and biases get noise so that a loader that
swapped two of them would be caught.
"""

from __future__ import annotations

import numpy as np

# Shared by every family: tiny, float32, no special tokens inside the vocabulary's use.
BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2)

LONGROPE_PAIRS = 8          # head_dim 16 / 2
FAMILIES = {
    # Llama-3.x: the llama3 rotary rule with pairs in all three of its bands (head_dim 16:
    # wavelengths 2π·10⁴^(i/8); with an original context of 64 the first pair is kept, the
    # next two blended, the rest divided by 8), tied embeddings.
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                          high_freq_factor=4.0, original_max_position_embeddings=64))),
    # Mistral: a window of 4, far shorter than prompt + generation; linear rotary scaling.
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(
        sliding_window=4, head_dim=16, rope_scaling=dict(rope_type="linear", factor=2.0))),
    # Qwen2: q/k/v biases; the upper layer windowed (max_window_layers); yarn.
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        use_sliding_window=True, sliding_window=5, max_window_layers=1,
        rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32))),
    # Qwen3: q/k RMSNorm per head, an explicit head_dim wider than D/N.
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24)),
    # Phi-3: fused qkv_proj and gate_up_proj; longrope, every prompt past the short context.
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(
        original_max_position_embeddings=2,
        rope_scaling=dict(type="longrope", short_factor=list(np.linspace(1, 2, LONGROPE_PAIRS)),
                          long_factor=list(np.linspace(1, 9, LONGROPE_PAIRS))))),
    # Gemma: (1 + w) norms, √D embedding scale, tanh GELU, tied embeddings.
    "gemma": ("GemmaConfig", "GemmaForCausalLM", dict(head_dim=16)),
    # Gemma-2: soft-capping, sandwich norms, query_pre_attn_scalar, alternating windows.
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=16, sliding_window=4, query_pre_attn_scalar=24, attn_logit_softcapping=20.0,
        final_logit_softcapping=10.0)),
    # Mixtral: 4 experts, top 2, renormalised.
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(
        num_local_experts=4, num_experts_per_tok=2)),
    # Qwen2-MoE: a shared expert behind a sigmoid gate; the first layer dense.
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, mlp_only_layers=[0], norm_topk_prob=False)),
    # Qwen3-MoE: q/k norms and renormalised top-k.
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)),
    # DeepSeek-V2: latent attention without a query latent; group-limited greedy routing
    # (3 experts from the best 2 of 4 groups of 2: the limit binds whenever the third-best
    # expert lies in a third group), a routed scale, shared experts, a dense first layer;
    # DeepSeek's yarn with mscale.
    "deepseek_v2": ("DeepseekV2Config", "DeepseekV2ForCausalLM", dict(
        num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=12, n_routed_experts=8, num_experts_per_tok=3,
        moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=1,
        topk_method="group_limited_greedy", n_group=4, topk_group=2, routed_scaling_factor=2.0,
        rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32,
                          mscale=1.0, mscale_all_dim=1.0, beta_fast=32, beta_slow=1))),
    # DeepSeek-V3: a query latent; sigmoid scores with a selection bias, groups scored by
    # their two best, renormalised and scaled.
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM", dict(
        num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=12, qk_nope_head_dim=8,
        qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=24, n_shared_experts=1, first_k_dense_replace=1, n_group=4,
        topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True)),
    # Gemma-3: Gemma-2's block with per-head (1 + w) q/k norms; a local layer (window 3,
    # θ = 10⁴) and a global one (θ = 10⁶, linear scaling ×2); query_pre_attn_scalar ≠ H.
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=16, sliding_window=3, query_pre_attn_scalar=24, rope_theta=1e6,
        rope_local_base_freq=1e4, rope_scaling=dict(rope_type="linear", factor=2.0),
        layer_types=["sliding_attention", "full_attention"])),
    # A multimodal Gemma-3: the same language model under text_config, beside a (tiny) vision
    # tower and projector that the decoder must leave alone.
    "gemma3": ("Gemma3Config", "Gemma3ForConditionalGeneration", dict(
        text_config={"model_type": "gemma3_text", **BASE, **{
            "head_dim": 16, "sliding_window": 3, "query_pre_attn_scalar": 24, "rope_theta": 1e6,
            "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            "layer_types": ["sliding_attention", "full_attention"]}},
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, image_size=28, patch_size=14),
        mm_tokens_per_image=4, boi_token_index=125, eoi_token_index=126, image_token_index=127)),
    # OLMo-2: norms after each branch only; q/k RMSNorms over the whole projection.
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict()),
    # SmolLM3: the second layer without positions (interval 2), and windowed (4).
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        no_rope_layer_interval=2, use_sliding_window=True, sliding_window=4)),
    # GPT-NeoX: parallel branches on two LayerNorms, a quarter of each head rotated, fused
    # per-head qkv, biases, a plain GELU MLP, an untied embed_out.
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        num_key_value_heads=4, rotary_pct=0.25, use_parallel_residual=True)),
    # StableLM: parallel branches on one LayerNorm, a quarter rotated, q/k/v biases, per-head
    # q/k LayerNorms with a gain per head.
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(
        use_parallel_residual=True, qk_layernorm=True, use_qkv_bias=True,
        partial_rotary_factor=0.25)),
    # Granite: every multiplier away from 1.
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(
        embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
        logits_scaling=4.0)),
    # Cohere: parallel branches on one bias-free LayerNorm, interleaved rotary pairs, per-head
    # q/k norms with a gain per head, scaled tied logits.
    "cohere": ("CohereConfig", "CohereForCausalLM", dict(use_qk_norm=True, logit_scale=0.5)),
    # OLMoE: whole-projection q/k norms, a softmax router (4 experts, top 2, not
    # renormalised), q, k and v clipped at ±1.
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(
        num_experts=4, num_experts_per_tok=2, intermediate_size=32, clip_qkv=1.0)),
    # StarCoder2: LayerNorm, biases everywhere, a plain tanh-GELU MLP, a window of 4.
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(sliding_window=4)),
    # Phi-2: parallel branches on one LayerNorm, 0.4 of each head rotated (6 of 16 channels),
    # per-head q/k LayerNorms, biases everywhere including the logits.
    "phi": ("PhiConfig", "PhiForCausalLM", dict(
        num_key_value_heads=4, partial_rotary_factor=0.4, qk_layernorm=True)),
    # GPT-2: learned positions, LayerNorm, a plain tanh-GELU MLP, biases, fused c_attn.
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(
        n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=128, bos_token_id=1,
        eos_token_id=2)),
}
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmoe")
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")


def build(family: str, path, seed: int = 0, **overrides):
    """A random transformers model of `family` saved at `path`: returns the model (eval)."""
    import torch
    import transformers
    config_name, model_name, keys = FAMILIES[family]
    fields = dict(keys) if family in ("gpt2", "gemma3") else BASE | keys
    fields |= overrides
    torch.manual_seed(seed)
    config = getattr(transformers, config_name)(**fields)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        for name, w in model.named_parameters():
            if "norm" in name or ".ln_" in name or name.startswith("ln_") or "ln_f" in name \
                    or name == "lm_head.bias":
                w.add_(0.1 * torch.randn_like(w))    # gains (1 or Gemma's 0) and LN biases
            else:
                w.normal_(0.0, 1.0 / np.sqrt(w.shape[-1]))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.1)
    model.save_pretrained(path)
    return model
