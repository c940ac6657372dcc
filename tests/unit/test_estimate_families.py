"""The estimator on every family's published config.json, against transformers' own model.

For each config of `public_configs`, `inferbook estimate --config` must give the parameter
count of the model transformers builds from the same dictionary (on the `meta` device: shapes
without memory) within 0.5%, the active parameters of a mixture of experts within 2% (counted
here from the model's named parameters: every tensor whose name says "experts" is routed, the
rest is dense), and the KV bytes per token exactly as the family's attention defines them.
"""

import json
from functools import lru_cache

import pytest
from public_configs import CONFIGS

from inferbook.cli import main
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
             "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b", "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
             "google/gemma-2-9b": "gemma-2-9b", "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
             "deepseek-ai/DeepSeek-V2-Lite": "deepseek-v2-lite",
             "deepseek-ai/DeepSeek-V3": "deepseek-v3", "openai-community/gpt2": "gpt2"}


@lru_cache(maxsize=None)
def hf_counts(name: str) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of transformers' model for the config,
    built without memory."""
    raw = dict(CONFIGS[name])
    config = transformers.CONFIG_MAPPING[raw.pop("model_type")](**raw)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
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


def kv_per_token(raw: dict) -> int:
    """Bytes one token adds to every layer's bfloat16 cache, from the config's own keys."""
    if "kv_lora_rank" in raw:          # latent attention: the latent and one rotary key
        return raw["num_hidden_layers"] * (raw["kv_lora_rank"] + raw["qk_rope_head_dim"]) * 2
    if raw["model_type"] == "gpt2":
        return raw["n_layer"] * 2 * raw["n_embd"] * 2
    heads = raw.get("num_key_value_heads", raw["num_attention_heads"])
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    return raw["num_hidden_layers"] * 2 * heads * head_dim * 2


def cached_tokens(raw: dict, S: int) -> int:
    """Σ over layers of the tokens a layer keeps at context S: Gemma-2's even layers and every
    Phi-3 layer slide over their window (HF's modeling files); Qwen's window is off."""
    L = raw.get("num_hidden_layers", raw.get("n_layer"))
    if raw["model_type"] == "gemma2":
        return sum(min(S, raw["sliding_window"]) if i % 2 == 0 else S for i in range(L))
    if raw["model_type"] in ("phi3", "mistral") and raw.get("sliding_window"):
        return L * min(S, raw["sliding_window"])
    return L * S


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_estimate_gives_transformers_parameter_count_and_exact_kv_bytes(tmp_path, name):
    raw = CONFIGS[name]
    S = 6000                            # past Phi-3's and Gemma-2's windows
    got = cli_fields(tmp_path, raw, "--hardware", "H200", "--context", str(S), "--batch", "3")
    total, experts = hf_counts(name)
    assert got["params"] == pytest.approx(total, rel=0.005)
    k = raw.get("num_experts_per_tok")
    E = raw.get("num_local_experts") or raw.get("num_experts") or raw.get("n_routed_experts")
    active = total - experts + experts * k / E if experts else total
    assert got["active_params"] == pytest.approx(active, rel=0.02)
    assert got["kv_bytes_per_token"] == kv_per_token(raw)
    layers = raw.get("num_hidden_layers", raw.get("n_layer"))
    assert got["kv_bytes"] == 3 * cached_tokens(raw, S) * kv_per_token(raw) // layers


@pytest.mark.parametrize("name", sorted(PRESET_OF))
def test_each_family_preset_estimates_like_its_published_config(tmp_path, name):
    args = ["--hardware", "TPU v5p", "--chips", "8", "--batch", "4", "--context", "2048"]
    from_file = cli_fields(tmp_path, CONFIGS[name], *args)
    from_preset = cli_json(["--model", PRESET_OF[name], *args])
    for key in ("params", "active_params", "param_bytes", "kv_bytes_per_token", "kv_bytes",
                "step_time_s", "prefill_time_s", "max_batch"):
        assert from_file[key] == from_preset[key], key
    raw = CONFIGS[name]
    assert PRESETS[PRESET_OF[name]].max_seq_len == raw.get("max_position_embeddings",
                                                           raw.get("n_positions"))


def test_every_family_preset_has_a_published_config_here():
    assert set(PRESET_OF.values()) == set(FAMILY_CONFIGS)


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
