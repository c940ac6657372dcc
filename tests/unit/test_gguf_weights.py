"""GGUF weights: every supported type decodes as the `gguf` package decodes it, dequantized
at load time or kept in its blocks, and a file gives back the model it was written from.

The files are written by `gguf_files.write_gguf` with gguf-py's writer; the reference for each
tensor is gguf-py's own `dequantize` of the bytes in the file, with llama.cpp's row order of
the query and key projections undone by the inverse of the permutation the test applied.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gguf_files import RANDOM_BLOCK_TYPES, VOCAB_SIZE, llama_cpp_row_order, write_gguf

from inferbook.model import decoder
from inferbook.model.config import ModelConfig
from inferbook.model.gguf_checkpoint import load_gguf
from inferbook.model.quantized import QuantizedMatrix, is_quantized

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]
QUANTIZED = ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"]
# Widths that are whole K-quant super-blocks (256 weights) in every matrix's input dimension.
CFG = ModelConfig(L=2, D=256, F=512, N=4, K=2, H=64, V=VOCAB_SIZE, max_seq_len=128,
                  rope_theta=10_000.0, norm_eps=1e-5, tied_embeddings=False, name="gguf-test")


@pytest.fixture(scope="module")
def source_params():
    return decoder.init_params(CFG, seed=3)


@pytest.fixture(scope="module", params=TYPES)
def gguf_file(request, source_params, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / f"model-{request.param}.gguf"
    return request.param, write_gguf(path, CFG, source_params, request.param)


def reference_params(path):
    """The file's tensors decoded by gguf-py, in the library's names and layout."""
    import gguf
    reader = gguf.GGUFReader(str(path))
    dense = {t.name: gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
             .reshape([int(d) for d in reversed(t.shape.tolist())]) for t in reader.tensors}

    def matrix(name, heads=None):
        w = dense[name]
        if heads is not None:
            w = w[np.argsort(llama_cpp_row_order(w.shape[0], heads))]
        return w.T
    layers = []
    for i in range(CFG.L):
        b = f"blk.{i}."
        layers.append({"attn_norm": dense[b + "attn_norm.weight"],
                       "wq": matrix(b + "attn_q.weight", CFG.N),
                       "wk": matrix(b + "attn_k.weight", CFG.K),
                       "wv": matrix(b + "attn_v.weight"), "wo": matrix(b + "attn_output.weight"),
                       "mlp_norm": dense[b + "ffn_norm.weight"],
                       "w_gate": matrix(b + "ffn_gate.weight"), "w_up": matrix(b + "ffn_up.weight"),
                       "w_down": matrix(b + "ffn_down.weight")})
    return {"embed": dense["token_embd.weight"], "final_norm": dense["output_norm.weight"],
            "unembed": matrix("output.weight"), "layers": layers}, reader


_decoded = jax.jit(lambda m: m.dequantize())


def dense(w):
    return np.asarray(_decoded(w)) if is_quantized(w) else np.asarray(w)


def test_the_config_is_read_from_the_metadata(gguf_file):
    cfg, _ = load_gguf(gguf_file[1])
    assert cfg.replace(name=CFG.name) == CFG


def test_dequantized_weights_are_gguf_dequantize_of_the_file(gguf_file):
    _, path = gguf_file
    _, params = load_gguf(path)
    expected, _ = reference_params(path)
    for (where, ours), want in zip(jax.tree_util.tree_leaves_with_path(params),
                                   jax.tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(ours), want, err_msg=str(where))


def test_weights_kept_quantized_decode_to_the_same_numbers(gguf_file):
    qtype, path = gguf_file
    _, params = load_gguf(path, keep_quantized=True)
    expected, _ = reference_params(path)
    leaves = jax.tree.leaves(params, is_leaf=is_quantized)
    kept = [w for w in leaves if is_quantized(w)]
    assert len(kept) == (2 + 7 * CFG.L if qtype in QUANTIZED else 0)
    for ours, want in zip(leaves, jax.tree.leaves(expected)):
        np.testing.assert_array_equal(dense(ours), want)


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_kept_quantized_model_computes_the_dequantized_model(qtype, source_params, tmp_path):
    path = write_gguf(tmp_path / "m.gguf", CFG, source_params, qtype)
    _, plain = load_gguf(path)
    _, kept = load_gguf(path, keep_quantized=True)
    tokens = jnp.array([[5, 17, 3, 99, 42, 8, 61, 200]])
    want = np.asarray(decoder.forward(plain, CFG, tokens))
    # The same weights; only the order of float32 additions may differ (decoding fused into
    # the matmul), so the logits agree to float32 rounding of their own scale.
    np.testing.assert_allclose(np.asarray(decoder.forward(kept, CFG, tokens)), want,
                               rtol=0, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("qtype", QUANTIZED)
def test_kept_quantized_weights_hold_exactly_the_files_bytes(qtype, source_params, tmp_path):
    import gguf
    path = write_gguf(tmp_path / "m.gguf", CFG, source_params, qtype)
    _, kept = load_gguf(path, keep_quantized=True)
    file_bytes = sum(t.n_bytes for t in gguf.GGUFReader(str(path)).tensors
                     if t.tensor_type.name == qtype)
    ours = [w for w in jax.tree.leaves(kept, is_leaf=is_quantized) if is_quantized(w)]
    assert sum(w.nbytes for w in ours) == file_bytes
    # ... and the codes and scales are what the device holds, not a dense copy.
    held = sum(a.nbytes for w in ours for a in jax.tree.leaves(w))
    assert held == file_bytes


def test_an_f32_file_gives_back_the_params_it_was_written_from(source_params, tmp_path):
    _, params = load_gguf(write_gguf(tmp_path / "m.gguf", CFG, source_params, "F32"))
    for ours, want in zip(jax.tree.leaves(params), jax.tree.leaves(source_params)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(want))


def test_quantized_embeddings_are_looked_up_row_by_row():
    rng = np.random.default_rng(0)
    import gguf
    w = rng.standard_normal((40, 64)).astype(np.float32)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    q = QuantizedMatrix.from_bytes("Q8_0", raw, 40, 64)
    full = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q8_0)
    rows = jnp.array([[3, 39], [0, 3]])
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda q, r: q[r])(q, rows)),
                                  full[np.asarray(rows)])
    x = rng.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x, q: x @ q.T)(x, q)), x @ full.T,
                               rtol=1e-5, atol=1e-5)
    assert q.T.shape == (64, 40) and q.nbytes == raw.nbytes


def test_random_block_types_are_the_k_quants():
    assert set(RANDOM_BLOCK_TYPES) <= set(QUANTIZED)


def llama3_divisors(H, theta, factor, low=1.0, high=4.0, original=8192):
    """Llama 3's rope scaling as llama.cpp's converter stores it: per frequency, the divisor
    of its inverse wavelength (1 for short wavelengths, `factor` for long, a ramp between)."""
    out = []
    for i in range(0, H, 2):
        wavelen = 2 * np.pi * theta ** (i / H)
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def test_llama3_rope_scaling_is_recovered_from_rope_freqs(source_params, tmp_path):
    cfg = CFG.replace(rope_theta=500_000.0)
    divisors = llama3_divisors(cfg.H, cfg.rope_theta, 32.0)
    path = write_gguf(tmp_path / "l3.gguf", cfg, source_params,
                      extra={"rope_freqs.weight": divisors})
    got, _ = load_gguf(path)
    sc = got.rope_scaling
    assert (sc.kind, sc.factor, sc.low_freq_factor, sc.high_freq_factor,
            sc.original_max_len) == ("llama3", 32.0, 1.0, 4.0, 8192)
    bad = write_gguf(tmp_path / "bad.gguf", cfg, source_params,
                     extra={"rope_freqs.weight": divisors[::-1].copy()})
    from inferbook.model.safetensors_io import CheckpointError
    with pytest.raises(CheckpointError, match="rope_freqs"):
        load_gguf(bad)


@pytest.mark.hf
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transformers_reads_our_test_files_as_the_library_does(arch, tmp_path):
    """An independent reader of the same file: transformers' GGUF loader (its own names, its
    own undoing of llama.cpp's row order) must compute the library's logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from inferbook.model.hf_config import from_hf_config
    cfg = CFG if arch == "llama" else from_hf_config(
        {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 256,
         "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
         "vocab_size": VOCAB_SIZE, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
         "rope_theta": 10_000.0, "tie_word_embeddings": False}, name="gguf-test")
    params = decoder.init_params(cfg, seed=5)
    path = write_gguf(tmp_path / "m.gguf", cfg, params, "Q8_0", arch=arch)
    loaded_cfg, ours = load_gguf(path)
    assert loaded_cfg.replace(name=cfg.name) == cfg
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf",
                                                           dtype=torch.float32).eval()
    tokens = [[5, 17, 3, 99, 42, 8, 61, 200, 1, 2]]
    with torch.no_grad():
        want = hf(torch.tensor(tokens)).logits[0].numpy()
    got = np.asarray(decoder.forward(ours, cfg, jnp.array(tokens)))[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_casting_kept_weights_changes_what_they_decode_to_not_their_blocks(source_params,
                                                                           tmp_path):
    path = write_gguf(tmp_path / "m.gguf", CFG, source_params, "Q4_0")
    _, kept = load_gguf(path, keep_quantized=True)
    cast = decoder.cast_params(kept, jnp.bfloat16)
    assert cast["layers"][0]["wq"].dtype == jnp.bfloat16
    for before, after in zip(jax.tree.leaves(kept), jax.tree.leaves(cast)):
        if before.dtype in (jnp.uint8, jnp.int8, jnp.float16):      # codes and scales
            np.testing.assert_array_equal(np.asarray(before), np.asarray(after))
