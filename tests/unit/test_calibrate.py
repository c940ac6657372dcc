"""Calibration's mechanics: it times the library's real decode step and prefill, its matmul
programs cover exactly the estimator's matmul parameters, its predictions are the formulas it
claims, and a cost that every program call pays is counted once, however many parts add up.

Whether the calibrated prediction lands within 5% of the measured step is a property of a
device, not of the code; chapter 2 checks it on every build, on whatever machine runs it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.presets import PRESETS
from inferbook.model.sampling import GREEDY
from inferbook.perf import calibration, counts, microbench, roofline, step_programs, timing


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
        parts = p.parts
        assert min(p.measured_s, p.matmul_s, p.attention_s, p.overhead_s) > 0
        assert p.kv_bytes == counts.kv_cache_bytes(cfg, p.batch, 8, itemsize)
        assert p.predicted_s == pytest.approx(
            parts.overhead_s + max(parts.matmul_s - parts.matmul_skeleton_s, 0)
            + max(parts.attention_s - parts.attention_skeleton_s, 0))
        assert p.roofline_s == pytest.approx(p.kv_bytes / sweep.bandwidth + max(
            2 * p.batch * P / sweep.peak_flops, P * itemsize / sweep.bandwidth))
        assert p.error == pytest.approx(p.predicted_s / p.measured_s - 1)
    # W is at least what the matmuls streamed at the smallest batch (an empirical roofline).
    assert sweep.bandwidth >= P * itemsize / sweep.points[0].matmul_s * (1 - 1e-12)
    chip = microbench.measured_chip(sweep.bandwidth, sweep.peak_flops)
    assert sweep.critical_batch == pytest.approx(roofline.critical_batch(chip, itemsize))


def test_a_sweep_times_each_batch_with_the_lead_in_and_budget_it_is_given(monkeypatch):
    # Chapter 2's sweep times each batch size as `inferbook bench` times a configuration.
    seen, real = [], calibration.time_parts

    def recording(programs, repeats, **kwargs):
        seen.append((repeats, kwargs.get("budget_s"), kwargs.get("lead_in")))
        return real(programs, repeats, **kwargs)
    monkeypatch.setattr(calibration, "time_parts", recording)
    sweep = calibration.decode_sweep(PRESETS["tiny"], batches=(1, 2), context=8, repeats=2,
                                     lead_in=1, budget_s=0.01)
    assert seen == [(2, 0.01, 1), (2, 0.01, 1)] and len(sweep.points) == 2


class _Program:
    """A program whose every call takes `seconds` (on a clock the test controls)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __call__(self):
        return None


@pytest.mark.parametrize("per_call_s", [0.0, 0.004])
def test_a_cost_every_program_pays_is_counted_once(per_call_s, monkeypatch):
    """A device where every program call costs `per_call_s` beyond its work (an accelerator's
    launch and wait): the step pays it once, and so must the prediction — not once per part,
    as a sum of parts timed alone would (on an H200 that sum predicted three times the
    measured step). The clock is the test's: each call takes exactly its program's seconds."""
    monkeypatch.setattr(timing, "timed_call", lambda fn: (fn(), fn.seconds))
    L, matmul, attention_layer, rest = 8, 0.006, 0.0005, 0.002
    step = _Program(per_call_s + matmul + L * attention_layer + rest)
    programs = [step, _Program(per_call_s + matmul),
                _Program(per_call_s + L * attention_layer + rest),   # the attention skeleton
                _Program(per_call_s + rest), _Program(per_call_s)]  # the skeleton
    parts, timed = calibration.time_parts(programs, repeats=3)
    assert len(timed) == calibration.PROGRAMS and parts.measured_s == pytest.approx(step.seconds)
    assert parts.attention_work_s == pytest.approx(L * attention_layer)
    assert parts.predicted_s == pytest.approx(parts.measured_s) and abs(parts.error) < 1e-9
    naive = parts.matmul_s + parts.attention_s + parts.overhead_s      # a plain sum of parts
    assert naive - parts.measured_s == pytest.approx(2 * per_call_s + rest)


def test_cheap_programs_get_more_rounds_until_the_budget_and_never_past_the_cap(monkeypatch):
    """Rounds beyond `rounds` run while all timed runs add up to less than the budget, and at
    most `max_rounds` (4·rounds by default); without a budget, exactly `rounds`."""
    monkeypatch.setattr(timing, "timed_call", lambda fn: (fn(), fn.seconds))
    cheap = [_Program(0.01), _Program(0.02)]              # 0.03 s a round
    assert len(timing.time_alternating(cheap, 3)[0].times_s) == 3
    # 0.295 s of budget: rounds until the timed runs reach it (the tenth round of 0.03 s).
    assert len(timing.time_alternating(cheap, 3, budget_s=0.295)[0].times_s) == 10
    assert len(timing.time_alternating(cheap, 3, budget_s=100.0)[0].times_s) == 12
    assert len(timing.time_alternating(cheap, 3, budget_s=100.0, max_rounds=5)[1].times_s) == 5
    costly = [_Program(1.0)]                               # past the budget at once
    assert len(timing.time_alternating(costly, 3, budget_s=0.3)[0].times_s) == 3


def test_with_a_lead_in_each_timed_call_follows_untimed_calls_of_its_own_program(monkeypatch):
    """`lead_in=n`: every round runs each program n times untimed, then once timed, so a
    timed call never follows another program (as a decode step follows a step)."""
    calls, timed = [], []

    def timed_call(fn):
        fn()
        timed.append(len(calls) - 1)          # the index of the call that was timed
        return None, 0.01
    monkeypatch.setattr(timing, "timed_call", timed_call)
    a, b = (lambda: calls.append("a")), (lambda: calls.append("b"))
    timing.time_alternating([a, b], 3, warmup=1, lead_in=2, max_rounds=3)
    # The compiling calls and one warm-up round, then each round: a a a(timed) b b b(timed).
    assert calls == ["a", "b"] * 2 + ["a", "a", "a", "b", "b", "b"] * 3
    assert [calls[i] for i in timed] == ["a", "b"] + ["a", "b"] * 3
    assert timed[2:] == [6, 9, 12, 15, 18, 21]


def test_a_part_faster_than_its_skeleton_adds_no_negative_work():
    parts = calibration.Parts(measured_s=1.0, matmul_s=0.1, attention_s=0.2, overhead_s=0.5,
                              matmul_skeleton_s=0.15, attention_skeleton_s=0.05)
    assert parts.matmul_work_s == 0 and parts.attention_work_s == pytest.approx(0.15)
    assert parts.predicted_s == pytest.approx(0.65)
    record = parts.as_record()
    assert record["predicted_s"] == parts.predicted_s and record["error"] == parts.error
    assert record["matmul_skeleton_s"] == 0.15
    # Overlapped: the longer of the skeleton's step (0.5) and the work (0 + 0.15).
    assert record["overlapped_s"] == pytest.approx(0.5)
    assert calibration.Parts(1.0, 0.9, 0.3, 0.2, 0.1, 0.1).overlapped_s == pytest.approx(1.0)


def test_the_prefill_parts_run_the_library_prefill_and_its_matmuls():
    cfg = PRESETS["tiny"]
    params = decoder.init_params(cfg, 0)
    tiny_params = decoder.init_params(step_programs.skeleton(cfg), 0)
    T = 12
    run, matmuls, attention, *skeleton = calibration.prefill_parts(params, tiny_params, cfg, T)
    logits, cache = run()
    tokens = jnp.zeros((1, T), jnp.int32)
    np.testing.assert_allclose(logits, decoder.forward(params, cfg, tokens)[:, -1], rtol=1e-5,
                               atol=1e-5)
    assert matmuls().shape == (1, cfg.V)               # logits for the last position only
    # The attention skeleton's prefill writes the model's caches: its heads, its widths.
    _, attention_cache = attention()
    assert attention_cache.k[0].shape == cache.k[0].shape and len(attention_cache.k) == cfg.L
    for program in skeleton:
        jax.block_until_ready(program())


def test_a_matmul_timing_reports_what_it_measured():
    t = microbench.measure_matmul(4, 64, 128, jnp.float32, total_bytes=1 << 20, repeats=1)
    assert t.flops_per_s == pytest.approx(2 * 4 * 64 * 128 / t.seconds)
    assert t.weight_bytes_per_s == pytest.approx(64 * 128 * 4 / t.seconds)


def step_flops(params, cfg, B, S):
    """XLA's FLOP count of one compiled decode step of `cfg` over B caches of S tokens."""
    cache = kvcache.init_cache(cfg, B, S + 1)._replace(lengths=jnp.full((B,), S, jnp.int32))
    lowered = decode.next_token.lower(params, cfg, jnp.zeros((B,), jnp.int32),
                                      jnp.zeros((B,), bool), cache, jax.random.key(0),
                                      GREEDY, -1)
    cost = lowered.compile().cost_analysis()
    return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]


def xla_flops(prog):
    cost = prog.func.lower(*prog.args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]


@pytest.mark.parametrize("cfg", [PRESETS["small"],
                                 ModelConfig(L=2, D=256, F=512, N=4, K=1, H=64, V=512,
                                             mlp="plain", tied_embeddings=True)],
                         ids=["small", "mqa-plain-tied"])
def test_the_matmul_program_does_the_steps_matmuls_and_the_attention_skeleton_its_attention(
        cfg):
    params = decoder.init_params(cfg, 0)
    B, S = 4, 32
    matmul = xla_flops(calibration.model_matmul_program(params, cfg, B))
    assert 2 * B * counts.matmul_params(cfg) <= matmul <= 1.02 * 2 * B * counts.matmul_params(cfg)
    # The attention skeleton's step beyond the skeleton's: the model's attention products
    # (its cache and the new token), plus the little its width-16 matmuls do beyond the
    # skeleton's (at most 2·B FLOPs per extra weight) and softmax's arithmetic (< 20%).
    acfg, tiny_cfg = step_programs.attention_skeleton(cfg), step_programs.skeleton(cfg)
    assert (acfg.N, acfg.K, acfg.H, acfg.L) == (cfg.N, cfg.K, cfg.H, cfg.L)
    attention = (step_flops(decoder.init_params(acfg, 0), acfg, B, S)
                 - step_flops(decoder.init_params(tiny_cfg, 0), tiny_cfg, B, S))
    products = counts.attention_flops(cfg, B, 1, S + 1)
    extra = 2 * B * (counts.matmul_params(acfg) - counts.matmul_params(tiny_cfg))
    assert products <= attention <= 1.2 * products + extra
    step = counts.forward_flops(cfg, B, 1, kv_len=S + 1)
    assert matmul + attention == pytest.approx(step, rel=0.2)


@pytest.mark.parametrize("width", [16, 64])
def test_a_skeleton_of_any_width_keeps_the_models_layers_and_runs_its_programs(width):
    """A wider skeleton (for a compiler that inlines the tiniest products) is still the model's
    step: its layers, grouping and MLP, at `width`; the parts built on it run."""
    cfg = PRESETS["small"]
    tiny_cfg = step_programs.skeleton(cfg, width)
    assert (tiny_cfg.D, tiny_cfg.F, tiny_cfg.V, tiny_cfg.K) == (width, width, width, 1)
    assert (tiny_cfg.L, tiny_cfg.G, tiny_cfg.mlp) == (cfg.L, cfg.G, cfg.mlp)
    params, tiny = decoder.init_params(cfg, 0), decoder.init_params(tiny_cfg, 0)
    B, S = 2, 8
    programs = calibration.decode_parts(params, tiny, cfg, B, S, skeleton=tiny_cfg)
    assert len(programs) == calibration.PROGRAMS
    assert programs[4]().shape == (B, width)            # the skeleton's logits: V = width
    tokens = programs[3]()
    assert tokens.shape == (B,) and int(jnp.max(tokens)) < width
    for program in calibration.prefill_parts(params, tiny, cfg, S, skeleton=tiny_cfg)[3:]:
        jax.block_until_ready(program())
