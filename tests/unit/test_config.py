"""ModelConfig: validation, derived sizes, presets and Hugging Face configs."""

import json

import pytest

from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.hf_config import from_hf_config
from inferbook.model.presets import PRESETS, get_preset

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax


def test_derived_sizes():
    cfg = get_preset("llama-2-70b")
    assert cfg.G * cfg.K == cfg.N
    assert cfg.q_dim == cfg.N * cfg.H and cfg.kv_dim == cfg.K * cfg.H
    assert cfg.attention_kind == "GQA"
    assert cfg.replace(K=1).attention_kind == "MQA"
    assert cfg.replace(K=cfg.N).attention_kind == "MHA"


@pytest.mark.parametrize("bad", [dict(N=6, K=4), dict(L=0), dict(D=-1), dict(H=7),
                                 dict(mlp="moe"), dict(window=0)])
def test_invalid_configs_are_refused(bad):
    base = dict(L=1, D=8, F=8, N=4, K=2, H=4, V=10)
    with pytest.raises(ConfigError):
        ModelConfig(**(base | bad))


def test_every_preset_is_valid_and_named_after_its_key():
    for name, cfg in PRESETS.items():
        assert cfg.name == name


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="llama-2-7b"):
        get_preset("llama-5")


def hf_dict(**overrides):
    base = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
            "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
            "vocab_size": 32000, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "tie_word_embeddings": False, "max_position_embeddings": 4096}
    return base | overrides


def test_llama_2_7b_config_json_gives_the_preset(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(hf_dict()))
    cfg = from_hf_config(tmp_path)
    assert cfg.replace(name="llama-2-7b") == get_preset("llama-2-7b")


def test_defaults_for_optional_keys():
    raw = hf_dict()
    del raw["num_key_value_heads"]
    cfg = from_hf_config(raw)
    assert cfg.K == cfg.N and cfg.H == 4096 // 32
    assert from_hf_config(hf_dict(head_dim=256)).H == 256


def test_newer_rope_parameters_are_read():
    raw = hf_dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    del raw["rope_theta"]
    assert from_hf_config(raw).rope_theta == 500000.0


@pytest.mark.parametrize("overrides, message", [
    ({"model_type": "bert"}, "unsupported architecture model_type='bert'"),
    ({"rope_scaling": {"rope_type": "proportional", "factor": 8.0}}, "'proportional'"),
    ({"hidden_size": "big"}, "'hidden_size'"),
    ({"rms_norm_eps": "1e-5"}, "'rms_norm_eps'"),
    ({"max_position_embeddings": "4096"}, "'max_position_embeddings'"),
    ({"sliding_window": "4096"}, "'sliding_window'"),
    ({"rope_theta": "10000"}, "'rope_theta'"),
    ({"rope_theta": float("nan")}, "'rope_theta'"),
    ({"rope_parameters": "default"}, "'rope_parameters'"),
    ({"hidden_act": ["silu"]}, "'hidden_act'"),
    ({"tie_word_embeddings": "yes"}, "'tie_word_embeddings'"),
    ({"num_key_value_heads": 7}, "multiple of K=7"),
])
def test_unsupported_and_malformed_configs_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        from_hf_config(hf_dict(**overrides))


def test_a_rope_rule_the_runtime_lacks_does_not_block_an_estimate():
    raw = hf_dict(rope_scaling={"rope_type": "proportional", "factor": 8.0})
    assert from_hf_config(raw, purpose="estimate").rope_scaling is None
    assert from_hf_config(raw, purpose="estimate") == from_hf_config(hf_dict(), purpose="estimate")


def test_missing_keys_and_unreadable_files_are_named(tmp_path):
    raw = hf_dict()
    del raw["vocab_size"]
    with pytest.raises(ConfigError, match="'vocab_size'"):
        from_hf_config(raw)
    with pytest.raises(ConfigError, match="no config file"):
        from_hf_config(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot read"):
        from_hf_config(tmp_path / "bad.json")


@pytest.mark.parametrize("bad, message", [
    (dict(rotary_fraction=0.3), "even width"),                 # 0.3 · 10 rotates 3
    (dict(rotary_fraction=1.5), "at most 1"),
    (dict(shared_norm=True), "residual='parallel'"),
    (dict(residual="parallel", norm_position="post"), "norm_position must be 'pre'"),
    (dict(nope_layers=(1,)), "below L=1"),
    (dict(local_rope_theta=1e4), "no window"),
    (dict(qk_norm_scope="rows"), "qk_norm_scope"),
    (dict(norm="layer", norm_plus_one=True), "norm_plus_one"),
    (dict(logit_multiplier=0.0), "logit_multiplier"),
    (dict(positions="learned", rotary_fraction=0.5), "need rotary positions"),
])
def test_inconsistent_features_are_refused(bad, message):
    base = dict(L=1, D=8, F=8, N=4, K=2, H=10, V=10)
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**(base | bad))


def test_layer_rope_names_each_layers_base_and_rule():
    from inferbook.model.features import RopeScaling
    cfg = ModelConfig(L=3, D=8, F=8, N=1, K=1, H=8, V=8, window=2,
                      layer_types=("sliding", "full", "full"), local_rope_theta=50.0,
                      rope_theta=1e6, rope_scaling=RopeScaling("linear", factor=2.0),
                      nope_layers=(2,))
    assert cfg.layer_rope(0) == (50.0, None)
    assert cfg.layer_rope(1) == (1e6, cfg.rope_scaling)
    assert cfg.layer_rope(2) is None


@pytest.mark.parametrize("raw, message", [
    ({"model_type": "smollm3", "no_rope_layers": [1, 2]}, "'no_rope_layers'"),
    ({"model_type": "gemma3", "text_config": [1]}, "'text_config'"),
    ({"model_type": "gemma3_text", "rope_parameters": {"full_attention": 3}}, "full_attention"),
    ({"model_type": "gemma3_text", "sliding_window": None}, "sliding_window is null"),
    ({"model_type": "phi", "partial_rotary_factor": 2.0}, "at most 1"),
    ({"model_type": "gpt_neox", "hidden_size": 4096, "num_attention_heads": 3},
     "not a multiple"),
])
def test_malformed_keys_of_the_newer_families_are_named(raw, message):
    with pytest.raises(ConfigError, match=message):
        from_hf_config(hf_dict(**raw))
