"""Families as table entries: what each one's ``config.json`` says, in the model's features.

Most families since Llama are Llama with a few switches turned: the norms after the branches
(OLMo-2), the branches in parallel (GPT-NeoX, Phi, StableLM, Cohere), part of each head
rotated (GPT-NeoX, Phi, StableLM), layers without positions (SmolLM3), multipliers
(Granite, Cohere), LayerNorm and biases (StarCoder2, Phi). A `Family` records exactly that:
the defaults of the family's configuration class in transformers (for keys a file may leave
out), the names of the keys it spells differently, the features every model of the family
has (`fixed`), and the features its keys switch (`keyed`). A new family whose modeling file
is Llama's plus switches the model already has is one more entry in `FAMILIES`.

Families whose keys need more than a lookup (GPT-NeoX's legacy rotary keys, Gemma-3's two
rotary bases) have a reader function of their own in `family_readers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from inferbook.model.features import ConfigError, MoE
from inferbook.model.hf_keys import ConfigKeys, layer_types, llama_like, rotary_fraction

__all__ = ["Family", "FAMILIES", "PARTIAL_ROTARY_FAMILIES"]

Keyed = Callable[[ConfigKeys, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Family:
    """How one family's config.json maps onto `ModelConfig` fields.

    Attributes:
      defaults: the family's configuration-class defaults for keys a file may omit.
      eps_key, eps_default: the key of the norms' epsilon and its default.
      act_key, act_default: the key of the activation and its default.
      tie: whether embeddings are tied when the file does not say.
      theta_default: the rotary base when the file does not say.
      rotary: the default share of each head that rotates, for a family that reads
        ``partial_rotary_factor`` (None: whole heads, and the key is not read).
      fixed: features every model of the family has.
      keyed: features the file's keys switch: (keys, fields read so far) -> fields.
    """

    defaults: Mapping[str, Any] = field(default_factory=dict)
    eps_key: str = "rms_norm_eps"
    eps_default: float = 1e-6
    act_key: str = "hidden_act"
    act_default: str = "silu"
    tie: bool = False
    theta_default: float = 10_000.0
    rotary: float | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    keyed: Keyed | None = None

    def read(self, hf: ConfigKeys, purpose: str) -> dict[str, Any]:
        """The `ModelConfig` fields of a config.json of this family."""
        hf = ConfigKeys({**self.defaults, **hf.hf}, hf.where)
        out = llama_like(hf, purpose, tie=self.tie, act_key=self.act_key,
                         act_default=self.act_default, eps_key=self.eps_key,
                         eps_default=self.eps_default, theta_default=self.theta_default)
        if self.rotary is not None:
            out["rotary_fraction"] = rotary_fraction(hf, self.rotary)
        out.update(self.fixed)
        if self.keyed is not None:
            out.update(self.keyed(hf, out))
        return out


def _olmoe(hf: ConfigKeys, out: dict[str, Any]) -> dict[str, Any]:
    return dict(qkv_clip=hf.float("clip_qkv", None),
                moe=MoE(E=hf.int("num_experts"), k=hf.int("num_experts_per_tok"), F=out["F"],
                        renormalize=hf.bool("norm_topk_prob", False)))


def _smollm3(hf: ConfigKeys, out: dict[str, Any]) -> dict[str, Any]:
    """NoPE every `no_rope_layer_interval`-th layer (or as ``no_rope_layers`` lists: 1 rotates,
    0 does not); with ``use_sliding_window`` the NoPE layers slide."""
    L = out["L"]
    flags = hf.hf.get("no_rope_layers")
    if flags is None:
        every = hf.int("no_rope_layer_interval", 4)
        flags = [int((i + 1) % every != 0) for i in range(L)]
    if not isinstance(flags, list) or len(flags) < L or any(f not in (0, 1) for f in flags):
        raise ConfigError(f"config key 'no_rope_layers' must list 1 or 0 for each of the {L} "
                          f"layers, got {flags!r}")
    nope = tuple(i for i in range(L) if not flags[i])
    window = out["window"] if hf.bool("use_sliding_window", False) else None
    types = None if window is None else layer_types(
        hf, L, lambda i: "sliding" if i in nope else "full")
    if types is not None and "sliding" not in types:
        types, window = None, None
    return dict(nope_layers=nope, window=window, layer_types=types)


def _granite(hf: ConfigKeys, out: dict[str, Any]) -> dict[str, Any]:
    # Granite's softmax scale is attention_multiplier itself, 1.0 when absent (not 1/√H).
    return dict(embed_multiplier=hf.float("embedding_multiplier", 1.0),
                residual_multiplier=hf.float("residual_multiplier", 1.0),
                query_scale=hf.float("attention_multiplier", 1.0),
                logit_multiplier=1.0 / hf.float("logits_scaling", 1.0))


def _stablelm(hf: ConfigKeys, out: dict[str, Any]) -> dict[str, Any]:
    parallel = hf.bool("use_parallel_residual", False)
    return dict(qkv_bias=hf.bool("use_qkv_bias", False), o_bias=False,
                qk_norm=hf.bool("qk_layernorm", False),
                residual="parallel" if parallel else "sequential", shared_norm=parallel)


def _biases(hf: ConfigKeys, out: dict[str, Any]) -> dict[str, Any]:
    bias = hf.bool("use_bias", True)              # StarCoder2: every linear layer, or none
    return dict(qkv_bias=bias, o_bias=bias, mlp_bias=bias)


_LAYER_NORM = dict(eps_key="layer_norm_eps", eps_default=1e-5)
_PARALLEL_ONE_NORM = dict(residual="parallel", shared_norm=True)

FAMILIES: dict[str, Family] = {
    # allenai/OLMo-2: norms on each branch's output only, q/k norms over whole projections.
    "olmo2": Family(eps_default=1e-5, defaults={"max_position_embeddings": 2048},
                    fixed=dict(norm_position="post", qk_norm=True, qk_norm_scope="whole")),
    # allenai/OLMoE: OLMo's q/k norms (before the norm-free block of OLMo-2) and a softmax
    # router over E experts, top k, optionally renormalised; q, k, v optionally clipped.
    "olmoe": Family(eps_default=1e-5, defaults={"num_experts": 64, "num_experts_per_tok": 8},
                    fixed=dict(qk_norm=True, qk_norm_scope="whole"), keyed=_olmoe),
    # HuggingFaceTB/SmolLM3: Llama with every fourth layer's positions removed (NoPE).
    "smollm3": Family(tie=True, theta_default=2_000_000.0, keyed=_smollm3),
    # ibm-granite: Llama with four multipliers (embedding, residual, attention, logits).
    "granite": Family(keyed=_granite),
    # CohereForAI (Command-R): one LayerNorm without bias before parallel branches, rotary
    # pairs interleaved, logits scaled; optional per-head q/k norms with a gain per head.
    "cohere": Family(**_LAYER_NORM, tie=True, theta_default=500_000.0,
                     defaults={"max_position_embeddings": 8192},
                     fixed=dict(norm="layer_no_bias", rope_interleaved=True, **_PARALLEL_ONE_NORM,
                                qk_norm_scope="each_head"),
                     keyed=lambda hf, out: dict(logit_multiplier=hf.float("logit_scale", 0.0625),
                                                qk_norm=hf.bool("use_qk_norm", False))),
    # stabilityai/StableLM: LayerNorm, a quarter of each head rotated, optional q/k biases,
    # per-head q/k LayerNorms without bias, optionally parallel branches on one norm.
    "stablelm": Family(**_LAYER_NORM, rotary=0.25, fixed=dict(
        norm="layer", qk_norm_scope="each_head", qk_norm_kind="layer_no_bias"), keyed=_stablelm),
    # bigcode/StarCoder2: LayerNorm, a plain tanh-GELU MLP, biases everywhere, one window.
    "starcoder2": Family(eps_key="norm_epsilon", eps_default=1e-5, act_default="gelu_pytorch_tanh",
                         tie=True, fixed=dict(norm="layer", mlp="plain"), keyed=_biases),
    # microsoft/phi-1.5, phi-2: parallel branches on one LayerNorm, part of each head rotated,
    # a plain GELU MLP, biases everywhere including the logits, optional per-head q/k norms.
    "phi": Family(**_LAYER_NORM, act_default="gelu_new", rotary=0.5, defaults={
        "max_position_embeddings": 2048}, fixed=dict(
            norm="layer", mlp="plain", **_PARALLEL_ONE_NORM, qkv_bias=True, o_bias=True,
            mlp_bias=True, unembed_bias=True),
        keyed=lambda hf, out: dict(qk_norm=hf.bool("qk_layernorm", False))),
}

# Families whose modeling file reads partial_rotary_factor (elsewhere the key is refused).
PARTIAL_ROTARY_FAMILIES = ("stablelm", "phi", "gpt_neox")
