"""The estimator on every family's published config.json, against transformers' own model.

For each stored config of `public_configs`, `inferbook estimate --config` must give exactly
the parameter count of the model transformers builds from the same dictionary (on the `meta`
device: shapes without memory; the parameters and the buffers its checkpoint stores; a
multimodal Gemma-3's language model, without its vision encoder), exactly the active
parameters of a mixture of experts (counted here from the model's named parameters: every
tensor whose name says "experts" is routed, the rest is dense), and the KV bytes per token
and per context exactly as transformers' config defines the attention: its KV heads, head
size and layer types. Each family preset must be the model its stored config describes.
"""

import json
from functools import lru_cache

import pytest
from public_configs import CONFIGS, source

from inferbook.cli import main
from inferbook.model.hf_config import from_hf_config
from inferbook.model.presets import PRESETS
from inferbook.model.presets_families import FAMILY_CONFIGS

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

PRESET_OF = {"meta-llama/Llama-3.1-8B": "llama-3.1-8b", "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
             "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
             "meta-llama/Llama-3.2-1B": "llama-3.2-1b", "meta-llama/Llama-3.2-3B": "llama-3.2-3b",
             "Qwen/Qwen2.5-7B": "qwen2.5-7b", "Qwen/Qwen3-8B": "qwen3-8b",
             "Qwen/Qwen3-32B": "qwen3-32b",
             "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b", "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
             "google/gemma-2-9b": "gemma-2-9b", "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
             "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
             "deepseek-ai/DeepSeek-V3": "deepseek-v3", "openai-community/gpt2": "gpt2",
             "google/gemma-3-1b-pt": "gemma-3-1b", "google/gemma-3-4b-it": "gemma-3-4b",
             "google/gemma-3-27b-it": "gemma-3-27b", "allenai/OLMo-2-1124-7B": "olmo-2-7b",
             "HuggingFaceTB/SmolLM3-3B": "smollm3-3b", "EleutherAI/pythia-1b": "pythia-1b"}
NOT_THE_DECODER = ("vision_tower", "multi_modal_projector")


@lru_cache(maxsize=None)
def hf_model(name: str):
    """transformers' model for the config, built without memory, and its (text) config."""
    raw = dict(CONFIGS[name])
    config = transformers.CONFIG_MAPPING[raw.pop("model_type")](**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model, getattr(config, "text_config", None) or config


@lru_cache(maxsize=None)
def hf_counts(name: str) -> tuple[int, int]:
    """(the decoder's parameters, routed-expert parameters) of transformers' model: its
    parameters, and the buffers its checkpoint stores (DeepSeek-V3's score correction bias,
    updated by its balancing rule rather than by gradients)."""
    model, _ = hf_model(name)
    stored = set(model.state_dict())
    named = [(n, p) for n, p in [*model.named_parameters(), *model.named_buffers()]
             if (n in stored or isinstance(p, torch.nn.Parameter))
             and not any(part in n for part in NOT_THE_DECODER)]
    total = sum(p.numel() for _, p in named)
    experts = sum(p.numel() for n, p in named if ".experts." in n)
    return total, experts


def cli_fields(tmp_path, raw, *argv):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return cli_json(["--config", str(path), *argv])


def cli_json(argv):
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv, "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def kv_per_token(name: str) -> int:
    """Bytes one token adds to every layer's bfloat16 cache, from transformers' config."""
    _, c = hf_model(name)
    if getattr(c, "kv_lora_rank", None):   # latent attention: the latent and one rotary key
        return c.num_hidden_layers * (c.kv_lora_rank + c.qk_rope_head_dim) * 2
    heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_hidden_layers * 2 * heads * head_dim * 2


def cached_tokens(name: str, S: int) -> int:
    """Σ over layers of the tokens a layer keeps at context S: a sliding layer (transformers'
    layer_types, or every layer of a model with a window and no types) keeps its window."""
    _, c = hf_model(name)
    window, types = getattr(c, "sliding_window", None), getattr(c, "layer_types", None)
    if types is None:
        types = ["sliding_attention" if window else "full_attention"] * c.num_hidden_layers
    return sum(min(S, window) if t == "sliding_attention" else S for t in types)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_estimate_gives_transformers_parameter_count_and_exact_kv_bytes(tmp_path, name):
    raw = CONFIGS[name]
    S = 6000                            # past every window of the stored configs
    got = cli_fields(tmp_path, raw, "--hardware", "H200", "--context", str(S), "--batch", "3")
    total, experts = hf_counts(name)
    assert got["params"] == total, source(name)
    _, c = hf_model(name)
    k = getattr(c, "num_experts_per_tok", None)
    E = next((getattr(c, key) for key in ("num_local_experts", "num_experts", "n_routed_experts")
              if getattr(c, key, None)), None)
    assert got["active_params"] == (total - experts + experts * k // E if experts else total)
    assert got["kv_bytes_per_token"] == kv_per_token(name)
    assert got["kv_bytes"] == 3 * cached_tokens(name, S) * kv_per_token(name) \
        // c.num_hidden_layers


@pytest.mark.parametrize("name", sorted(PRESET_OF))
def test_each_family_preset_is_the_model_its_published_config_describes(tmp_path, name):
    preset = PRESETS[PRESET_OF[name]]
    assert from_hf_config(CONFIGS[name], name=preset.name) == preset, source(name)
    args = ["--hardware", "TPU v5p", "--chips", "4", "--batch", "4", "--context", "2048"]
    from_file = cli_fields(tmp_path, CONFIGS[name], *args)
    from_preset = cli_json(["--model", PRESET_OF[name], *args])
    for key in ("params", "active_params", "param_bytes", "kv_bytes_per_token", "kv_bytes",
                "step_time_s", "prefill_time_s", "max_batch"):
        assert from_file[key] == from_preset[key], key


def test_every_family_preset_has_a_published_config_here():
    assert set(PRESET_OF.values()) == set(FAMILY_CONFIGS)
    assert set(PRESET_OF) <= set(CONFIGS)


@pytest.mark.parametrize("change", [
    {"rope_scaling": {"rope_type": "a-rule-from-2030", "factor": 4.0}},
    {"hidden_act": "gelu_fast_new_2030"},
    {"quantization_config": {"quant_method": "fp8"}, "some_future_key": [1, 2]},
])
def test_keys_that_change_no_estimate_never_block_it(tmp_path, change):
    raw = CONFIGS["meta-llama/Llama-3.1-8B"]
    base = cli_fields(tmp_path, raw, "--hardware", "L4", "--context", "1000")
    changed = cli_fields(tmp_path, {**raw, **change}, "--hardware", "L4", "--context", "1000")
    for key in ("params", "kv_bytes", "step_time_s", "prefill_time_s"):
        assert changed[key] == base[key]
