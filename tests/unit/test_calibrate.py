"""Calibration's mechanics: it times the library's real decode step, its matmul program covers
exactly the estimator's matmul parameters, and its predictions are the formulas it claims.

Whether the calibrated prediction lands within ±25% of the measured step is a property of a
device, not of the code; chapter 2 asserts it on every build, on whatever machine runs it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.presets import PRESETS
from inferbook.perf import calibration, counts, microbench, roofline


@pytest.mark.parametrize("name", ["tiny", "small", "cpu-336mb", "llama-2-13b", "scaling-book-18b"])
def test_the_matmul_program_multiplies_by_every_matmul_weight_once(name):
    cfg = PRESETS[name]
    mats = jax.eval_shape(lambda p: calibration.model_matmuls(p, cfg), decoder.abstract_params(cfg))
    assert sum(int(np.prod(m.shape)) for m in mats) == counts.matmul_params(cfg)
    assert all(len(m.shape) == 2 for m in mats)


def test_the_stepper_runs_a_real_decode_step_and_keeps_its_cost_fixed():
    cfg = PRESETS["tiny"]
    params = decoder.init_params(cfg, 1)
    B, S = 3, 10
    step = calibration.decode_stepper(params, cfg, B, S)
    # The same first step through the public API, on an identical cache: S tokens written.
    cache = kvcache.init_cache(cfg, B, S + 1)._replace(lengths=jnp.full((B,), S, jnp.int32))
    logits, _ = decode.decode_step(params, cfg, jnp.zeros((B,), jnp.int32), cache)
    tok = step()
    np.testing.assert_array_equal(np.asarray(tok), np.asarray(jnp.argmax(logits, -1)))
    for _ in range(3):                         # later steps: same shapes and work
        assert step().shape == (B,)


def test_a_sweep_reports_its_formulas():
    cfg = PRESETS["tiny"]
    sweep = calibration.decode_sweep(cfg, batches=(1, 4), context=8, repeats=1)
    assert [p.batch for p in sweep.points] == [1, 4]
    P, itemsize = counts.matmul_params(cfg), 4
    assert sweep.params == P and sweep.weight_bytes == P * itemsize
    for p in sweep.points:
        assert min(p.measured_s, p.matmul_s, p.attention_s, sweep.overhead_s) > 0
        assert p.kv_bytes == counts.kv_cache_bytes(cfg, p.batch, 8, itemsize)
        assert p.predicted_s == pytest.approx(p.attention_s + p.matmul_s + sweep.overhead_s)
        assert p.roofline_s == pytest.approx(p.kv_bytes / sweep.bandwidth + max(
            2 * p.batch * P / sweep.peak_flops, P * itemsize / sweep.bandwidth))
        assert p.attention_bytes_per_s == pytest.approx(p.kv_bytes / p.attention_s)
        assert p.error == pytest.approx(p.predicted_s / p.measured_s - 1)
    chip = microbench.measured_chip(sweep.bandwidth, sweep.peak_flops)
    assert sweep.critical_batch == pytest.approx(roofline.critical_batch(chip, itemsize))


def test_a_matmul_timing_reports_what_it_measured():
    t = microbench.measure_matmul(4, 64, 128, jnp.float32, total_bytes=1 << 20, repeats=1)
    assert t.flops_per_s == pytest.approx(2 * 4 * 64 * 128 / t.seconds)
    assert t.weight_bytes_per_s == pytest.approx(64 * 128 * 4 / t.seconds)
    assert microbench.measure_bandwidth(1 << 22, repeats=1, D=64, F=128).best > 0


def test_the_bandwidth_reads_read_the_bytes_they_count():
    nbytes, D, F = 1 << 20, 64, 128
    reduction, streaming = microbench.read_programs(nbytes, D, F)
    # The reduction sums nbytes / 4 float32 ones; the products run v (ones) through n distinct
    # matrices, matrix i full of i, n of them making half the reduction's bytes.
    assert float(reduction.run()) == nbytes / 4 == reduction.nbytes / 4
    n = nbytes // 2 // (D * F * 4)
    products = streaming.run()
    assert len(products) == n and streaming.nbytes == n * D * F * 4
    for i, out in enumerate(products):
        np.testing.assert_array_equal(out, np.full((1, F), D * i, np.float32))
    rates = microbench.read_rates([reduction, streaming], [0.5, 0.125])
    assert (rates.reduction, rates.streaming) == (nbytes / 0.5, n * D * F * 4 / 0.125)
    assert rates.best == max(rates.reduction, rates.streaming)
    assert rates.as_record()["read_bytes_per_s"] == rates.best


def xla_flops(prog):
    cost = prog.func.lower(*prog.args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]


@pytest.mark.parametrize("cfg", [PRESETS["small"],
                                 ModelConfig(L=2, D=256, F=512, N=4, K=1, H=64, V=512,
                                             mlp="plain", tied_embeddings=True)],
                         ids=["small", "mqa-plain-tied"])
def test_the_matmul_program_does_the_steps_matmul_flops_and_the_attention_program_its_attention(
        cfg):
    params = decoder.init_params(cfg, 0)
    B, S = 4, 32
    matmul = xla_flops(calibration.model_matmul_program(params, cfg, B))
    assert 2 * B * counts.matmul_params(cfg) <= matmul <= 1.02 * 2 * B * counts.matmul_params(cfg)
    attention = xla_flops(calibration.attention_program(cfg, B, S))
    products = counts.attention_flops(cfg, B, 1, S + 1)     # the cache and the new token
    assert products <= attention <= 1.2 * products
    step = counts.forward_flops(cfg, B, 1, kv_len=S + 1)
    assert matmul + attention == pytest.approx(step, rel=0.2)
