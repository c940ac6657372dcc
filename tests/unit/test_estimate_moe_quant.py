"""Mixtures of experts, quantized formats and prefill in the estimator, against references
written here: simulated routing, the KV chapter's int8 cache as allocated, and the bytes of
each format counted matrix by matrix."""

import math
from functools import partial

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.memory import kv_quant
from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA, MoE
from inferbook.model.presets import get_preset
from inferbook.perf import counts, params, quant
from inferbook.perf.estimator import critical_batch_moe, estimate, weight_bytes_read
from inferbook.perf.hardware import get_chip


@given(E=st.integers(2, 64), data=st.data())
def test_expected_experts_match_simulated_routing(E, data):
    """Route B tokens to k distinct experts each, uniformly (the k smallest of E random keys),
    in many trials; count the experts that received any token."""
    k = data.draw(st.integers(1, E))
    tokens = data.draw(st.integers(0, 64))
    rng = np.random.default_rng(E * 1000 + k)
    trials = 300
    keys = rng.random((trials, tokens, E))
    chosen = np.argsort(keys, axis=-1)[..., :k]                      # [trials, tokens, k]
    hit = np.zeros((trials, E), bool)
    np.put_along_axis(hit, chosen.reshape(trials, -1), True, axis=1)
    touched = hit.sum(axis=1)
    mean, sd = touched.mean(), max(touched.std(), 0.5)     # rare misses: floor the spread
    want = params.expected_experts(E, k, tokens)
    assert abs(mean - want) <= 5 * sd / math.sqrt(trials)
    assert want <= min(E, k * tokens) + 1e-9


def test_expected_experts_at_the_ends():
    assert params.expected_experts(8, 2, 1) == pytest.approx(2)
    assert params.expected_experts(8, 2, 0) == 0
    assert params.expected_experts(256, 8, 10 ** 6) == pytest.approx(256)
    with pytest.raises(ValueError):
        params.expected_experts(8, 9, 4)


def test_a_decode_steps_weight_read_grows_with_the_batch_toward_all_experts():
    """One token reads the active weights, less the input embedding table but its one row;
    64 tokens nearly every expert, and 64 rows of the table."""
    cfg, chip = get_preset("mixtral-8x7b"), get_chip("H100 SXM")
    reads = [estimate(cfg, chip, batch=B, context=1024, chips=2).weight_bytes_read
             for B in (1, 2, 4, 16, 64)]
    assert reads == sorted(reads)
    total, table, row = params.param_count(cfg) * 2, cfg.V * cfg.D * 2, cfg.D * 2
    assert reads[0] == pytest.approx(params.active_param_count(cfg) * 2 - table + row)
    assert reads[-1] == pytest.approx(total - table + 64 * row, rel=1e-6)


def test_the_moe_critical_batch_is_where_flops_catch_up_with_the_growing_read():
    cfg, chip = get_preset("qwen3-30b-a3b"), get_chip("TPU v5e")
    C, W = chip.bf16_flops_per_s, chip.hbm_bytes_per_s
    total = quant.weight_bytes(cfg, "bf16")
    experts = quant.weight_bytes(cfg, "bf16", ("expert",))
    A = params.active_param_count(cfg)
    b = critical_batch_moe(cfg, total, experts, 2 * A, C, W)
    at = lambda B: 2 * A * B / C - weight_bytes_read(cfg, total, experts, B) / W  # noqa: E731
    assert abs(at(b)) < 1e-9 * b and at(b * 0.99) < 0 < at(b * 1.01)
    # Far later than a dense model of the same active size, which reads only A weights.
    assert b > 5 * C * 2 / (2 * W)
    assert estimate(cfg, chip, batch=1, context=64).critical_batch == pytest.approx(b)


def toy(**kw):
    base = dict(L=3, D=64, F=96, N=4, K=2, H=16, V=100, max_seq_len=256)
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("cfg", [
    toy(), toy(tied_embeddings=True, qkv_bias=True, qk_norm=True),
    toy(moe=MoE(E=4, k=2, F=32, shared_F=48, shared_gate=True, dense_layers=(0,))),
    toy(N=4, K=4, H=24, mla=MLA(R_kv=32, H_nope=16, H_rope=8, H_v=16, R_q=24)),
])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "int8", "int4", "int4:32", "int8:16",
                                 "int4+min:32", "int8+min", "int4+min"])
def test_weight_formats_count_codes_and_one_scale_per_group(cfg, fmt):
    """Every layer matrix [rows, cols]: rows·cols codes and ceil(rows/group)·cols two-byte
    scales (one per column without a group), and as many two-byte minimums with '+min';
    everything else in bfloat16."""
    name, _, group_text = fmt.partition(":")
    asymmetric = name.endswith("+min")
    name = name.removesuffix("+min")
    code = {"bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5}[name]
    group = int(group_text) if group_text else (128 if name == "int4" else None)
    want = 0.0
    for t in params.tensors(cfg):
        if t.role in ("matrix", "expert") and fmt != "bf16":
            rows, cols = t.shape
            scales = cols * (1 if group is None else math.ceil(rows / group))
            want += t.count * (rows * cols * code + 2 * scales * (1 + asymmetric))
        else:
            want += 2 * t.size
    assert quant.weight_bytes(cfg, fmt) == pytest.approx(want)
    assert quant.weight_bytes(cfg, "bf16") == 2 * params.param_count(cfg)


@pytest.mark.parametrize("H", [16, 64])
def test_the_int8_kv_format_is_the_kv_chapters_cache_byte_for_byte(H):
    cfg = toy(H=H)
    cache = jax.eval_shape(partial(kv_quant.init_cache, cfg, 3, 40))
    stored = sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree.leaves(
        (cache.k, cache.v, cache.k_scale, cache.v_scale)))
    e = quant.kv_element_bytes(cfg, "int8")
    assert e == kv_quant.bytes_per_element(H)
    assert counts.kv_cache_bytes(cfg, 3, 40, e) == pytest.approx(stored)


def test_the_kv_format_of_latent_attention_scales_each_latent_vector():
    cfg = get_preset("deepseek-v2-lite")
    per_layer = cfg.mla.R_kv + cfg.mla.H_rope
    assert counts.kv_bytes_per_token(cfg, quant.kv_element_bytes(cfg, "int8")) == \
        pytest.approx(cfg.L * (per_layer + 4))


def test_prefill_is_the_slower_of_its_flops_and_its_bytes():
    """One chip, a dense model, the bare roofline: FLOPs of every projection for B·T tokens,
    the T×T attention rectangle, one row of logits per sequence; bytes of the weights (of the
    input embedding the rows of the B·T tokens) and the cache written."""
    cfg, chip = get_preset("llama-3.1-8b"), get_chip("A100 80GB")
    B, T = 2, 3000
    P = params.param_count(cfg)
    layer = 2 * cfg.D * cfg.N * cfg.H + 2 * cfg.D * cfg.K * cfg.H + 3 * cfg.D * cfg.F
    flops = (2 * B * T * cfg.L * layer + 4 * cfg.L * B * T * T * cfg.N * cfg.H
             + 2 * B * cfg.D * cfg.V)
    moved = 2 * (P - cfg.V * cfg.D + B * T * cfg.D) + B * T * 2 * cfg.L * cfg.K * cfg.H * 2
    est = estimate(cfg, chip, batch=B, context=4096, prompt=T, efficiency="ideal")
    want = max(flops / chip.bf16_flops_per_s, moved / chip.hbm_bytes_per_s)
    assert est.prefill_time_s == pytest.approx(want, rel=1e-12) and est.ttft_s == est.prefill_time_s
    assert flops / chip.bf16_flops_per_s > moved / chip.hbm_bytes_per_s      # compute-bound


def test_windowed_layers_cap_the_cache_and_the_decode_attention():
    cfg, chip = get_preset("gemma-2-9b"), get_chip("H100 SXM")
    short, long = (estimate(cfg, chip, batch=1, context=S) for S in (4096, 8192))
    per_layer = counts.kv_bytes_per_layer_token(cfg)
    local = sum(w is not None for w in cfg.windows)
    assert long.kv_bytes - short.kv_bytes == (cfg.L - local) * 4096 * per_layer
    assert long.kv_bytes_per_token == short.kv_bytes_per_token == cfg.L * per_layer


def test_library_functions_refuse_bad_input_with_value_errors():
    cfg, chip = get_preset("tiny"), get_chip("L4")
    for kw in ({"batch": 0}, {"batch": 2.5}, {"context": -1}, {"chips": 0},
               {"weight_bytes": float("nan")}, {"kv_bytes": 1e-20}, {"weights": "int3"},
               {"weights": "fp8+min"}, {"weights": "bf16+min"}, {"weights": "int4+min:0"},
               {"kv": "int4"}, {"context": 64, "prompt": 65}, {"context": 10 ** 6, "strict": True},
               {"batch": True}):
        with pytest.raises(ValueError):
            estimate(cfg, chip, **kw)
    from inferbook.perf import roofline
    with pytest.raises(ValueError):
        roofline.batches_that_fit(1e9, 0.0)
    assert roofline.batches_that_fit(1e300, 1e-300) > 10 ** 599
