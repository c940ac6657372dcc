"""Checkpoint reading and writing, and the errors a bad checkpoint must produce."""

import json

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from inferbook.model import checkpoint, decoder
from inferbook.model.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from inferbook.model.config import ConfigError, ModelConfig

CFG = ModelConfig(L=2, D=32, F=48, N=4, K=2, H=8, V=40)


def test_our_reader_agrees_with_the_safetensors_package(tmp_path):
    st_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(0)
    tensors = {"a": rng.normal(size=(3, 5)).astype(np.float32),
               "b": rng.integers(0, 9, size=(7,)).astype(np.int64),
               "c": rng.normal(size=(2, 2, 2)).astype(np.float16)}
    st_numpy.save_file(tensors, tmp_path / "x.safetensors")
    ours = checkpoint.read_safetensors(tmp_path / "x.safetensors")
    assert set(ours) == set(tensors)
    for name, ref in tensors.items():
        np.testing.assert_array_equal(ours[name], ref)
        assert ours[name].dtype == ref.dtype
    # ... and the package reads what we write.
    checkpoint.write_safetensors(tmp_path / "y.safetensors", tensors)
    back = st_numpy.load_file(tmp_path / "y.safetensors")
    for name, ref in tensors.items():
        np.testing.assert_array_equal(back[name], ref)


def test_bfloat16_round_trips(tmp_path):
    w = (np.arange(12, dtype=np.float32) / 7).astype(ml_dtypes.bfloat16).reshape(3, 4)
    checkpoint.write_safetensors(tmp_path / "bf.safetensors", {"w": w})
    back = checkpoint.read_safetensors(tmp_path / "bf.safetensors")["w"]
    assert back.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(back.astype(np.float32), w.astype(np.float32))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_save_then_load_gives_back_the_same_model(tmp_path, dtype):
    params = decoder.init_params(CFG, seed=1, dtype=dtype)
    save_checkpoint(tmp_path / "m", CFG, params)
    cfg, loaded = load_checkpoint(tmp_path / "m")
    assert (cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V) == (CFG.L, CFG.D, CFG.F, CFG.N,
                                                                  CFG.K, CFG.H, CFG.V)
    for a, b in zip(_leaves(params), _leaves(loaded)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def _leaves(params):
    return jax.tree.leaves(params)


def test_sharded_checkpoints_with_an_index_load(tmp_path):
    params = decoder.init_params(CFG, seed=2)
    save_checkpoint(tmp_path / "m", CFG, params)
    tensors = checkpoint.read_safetensors(tmp_path / "m" / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    for fname, keys in shards.items():
        checkpoint.write_safetensors(tmp_path / "m" / fname,
                                     {k: np.array(tensors[k]) for k in keys})
    (tmp_path / "m" / "model.safetensors").unlink()
    index = {"weight_map": {k: f for f, keys in shards.items() for k in keys}}
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(index))
    _, loaded = load_checkpoint(tmp_path / "m")
    np.testing.assert_array_equal(loaded["layers"][1]["w_down"], params["layers"][1]["w_down"])


def _saved(tmp_path):
    save_checkpoint(tmp_path / "m", CFG, decoder.init_params(CFG))
    return tmp_path / "m"


def test_a_missing_tensor_is_named(tmp_path):
    d = _saved(tmp_path)
    tensors = checkpoint.read_safetensors(d / "model.safetensors")
    tensors = {k: np.array(v) for k, v in tensors.items() if "layers.1.mlp.up_proj" not in k}
    checkpoint.write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj"):
        load_checkpoint(d)


def test_a_misshapen_tensor_is_named(tmp_path):
    d = _saved(tmp_path)
    tensors = {k: np.array(v)
               for k, v in checkpoint.read_safetensors(d / "model.safetensors").items()}
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((5, 32), np.float32)
    checkpoint.write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"k_proj\.weight' has shape \(5, 32\)"):
        load_checkpoint(d)


def test_an_unsupported_architecture_is_refused(tmp_path):
    d = _saved(tmp_path)
    config = json.loads((d / "config.json").read_text())
    config.update(architectures=["BertForMaskedLM"], model_type="bert")
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="BertForMaskedLM"):
        load_checkpoint(d)
    config.pop("architectures")
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="model_type='bert'"):
        load_checkpoint(d)


def test_biases_are_refused_with_a_clear_message(tmp_path):
    d = _saved(tmp_path)
    tensors = {k: np.array(v)
               for k, v in checkpoint.read_safetensors(d / "model.safetensors").items()}
    tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros((32,), np.float32)
    checkpoint.write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"q_proj\.bias"):
        load_checkpoint(d)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    d = _saved(tmp_path)
    (d / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing weight file"):
        load_checkpoint(d)
    (d / "model.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(d)


def test_a_weight_that_is_not_floating_point_is_refused_by_name(tmp_path):
    d = _saved(tmp_path)
    tensors = {k: np.array(v)
               for k, v in checkpoint.read_safetensors(d / "model.safetensors").items()}
    name = "model.layers.1.self_attn.o_proj.weight"
    tensors[name] = tensors[name].astype(np.int32)
    checkpoint.write_safetensors(d / "model.safetensors", tensors)
    with pytest.raises(CheckpointError, match=r"o_proj\.weight' has dtype I32"):
        load_checkpoint(d)


@pytest.mark.parametrize("family", ["gemma2", "deepseek_v3", "gpt2"])
def test_only_the_plain_decoder_is_saved(tmp_path, family):
    from family_configs import FAMILY_CONFIGS
    cfg = FAMILY_CONFIGS[family]
    with pytest.raises(CheckpointError, match="writes Llama/Mistral checkpoints"):
        save_checkpoint(tmp_path / "m", cfg, decoder.init_params(cfg))
    assert not (tmp_path / "m").exists()


def test_a_partial_rotary_factor_is_refused(tmp_path):
    d = _saved(tmp_path)
    config = json.loads((d / "config.json").read_text())
    config["partial_rotary_factor"] = 0.5
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="partial_rotary_factor=0.5"):
        load_checkpoint(d)
