"""The estimate's new fields, each against arithmetic written out here.

A whole generation is the prefill plus every decode step, each priced by the estimator at
its own context; a rate is tokens over that time; a cost per million tokens is the chips'
price over the seconds it takes to make them. The breakdown's components are bytes over the
achieved bandwidth and FLOPs over the achieved FLOP/s. A decode step reads B rows of the
input embedding; fp8 arithmetic runs at the fp8 peak; --mbu and --mfu replace the fractions;
a prefill's collectives add to its work unless they overlap; expert parallelism is chosen
when its step is the fastest, and then holds a copy of the non-expert weights per group.
"""

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf import counts, params, quant
from inferbook.perf.efficiency import Efficiency
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import get_chip
from inferbook.perf.layout_comms import layout_comms


def test_a_generation_is_its_prefill_and_every_decode_step():
    """40 output tokens: fewer steps than the sum's groups, so the sum is exact."""
    cfg, chip = get_preset("llama-3.1-8b"), get_chip("H100 SXM")
    B, T, N = 4, 300, 40
    est = estimate(cfg, chip, batch=B, context=T + N, prompt=T, output=N)
    steps = [estimate(cfg, chip, batch=B, context=T + i, prompt=T).step_time_s
             for i in range(1, N)]
    assert est.generation_time_s == pytest.approx(est.prefill_time_s + sum(steps), rel=1e-12)
    assert est.output_tokens_per_s == pytest.approx(B * N / est.generation_time_s, rel=1e-12)
    assert estimate(cfg, chip, batch=B, context=T, output=None).generation_time_s is None


def test_one_output_token_is_the_prefill_alone():
    cfg, chip = get_preset("llama-2-7b"), get_chip("A100 80GB")
    est = estimate(cfg, chip, batch=2, context=128, output=1)
    assert est.generation_time_s == est.prefill_time_s


def test_an_output_past_the_models_positions_warns_or_is_refused():
    cfg, chip = get_preset("llama-2-13b"), get_chip("TPU v5e")
    est = estimate(cfg, chip, context=4000, output=200)
    assert any(w.startswith("output ") and "4,096 positions" in w for w in est.warnings)
    with pytest.raises(ValueError, match="output"):
        estimate(cfg, chip, context=4000, output=200, strict=True)


def test_the_cost_per_million_tokens_is_the_chips_time_at_the_price():
    cfg, chip = get_preset("llama-3.1-70b"), get_chip("H100 SXM")
    n, B, T, N, price = 4, 16, 1000, 100, 2.75
    est = estimate(cfg, chip, batch=B, context=T + N, prompt=T, chips=n, output=N,
                   price_per_chip_hour=price)
    per_second = price * n / 3600
    assert est.usd_per_million_tokens == pytest.approx(
        per_second * est.step_time_s / B * 1e6, rel=1e-12)
    assert est.usd_per_million_prompt_tokens == pytest.approx(
        per_second * est.prefill_time_s / (B * T) * 1e6, rel=1e-12)
    assert est.usd_per_million_output_tokens == pytest.approx(
        per_second * est.generation_time_s / (B * N) * 1e6, rel=1e-12)
    plain = estimate(cfg, chip, batch=B, context=T, chips=n)
    assert plain.usd_per_million_tokens is None and plain.price_per_chip_hour is None


def test_the_breakdown_is_each_component_alone_at_the_achieved_rates():
    """One chip, a dense model, an efficiency whose every fraction differs."""
    cfg, chip = get_preset("llama-3.1-8b"), get_chip("H100 SXM")
    eff = Efficiency(mbu=0.7, mbu_cache=0.8, mfu_bf16=0.6, decode_layer_s=2e-5)
    B, S = 32, 2048
    est = estimate(cfg, chip, batch=B, context=S, efficiency=eff)
    b, W, C = est.breakdown, chip.hbm_bytes_per_s, chip.bf16_flops_per_s
    D, N, K, H, L, F, V = cfg.D, cfg.N, cfg.K, cfg.H, cfg.L, cfg.F, cfg.V
    read = 2 * (params.param_count(cfg) - V * D + B * D)          # the table: B rows
    assert b.weights_s == pytest.approx(read / (W * 0.7), rel=1e-12)
    assert b.kv_cache_s == pytest.approx(B * S * 2 * L * K * H * 2 / (W * 0.8), rel=1e-12)
    attention = 4 * B * S * N * H * L + 2 * B * L * (2 * D * N * H + 2 * D * K * H)
    assert b.attention_s == pytest.approx(attention / (C * 0.6), rel=1e-12)
    assert b.mlp_s == pytest.approx(2 * B * L * 3 * D * F / (C * 0.6), rel=1e-12)
    assert b.logits_s == pytest.approx(2 * B * D * V / (C * 0.6), rel=1e-12)
    assert b.communication_s == 0.0 and b.overhead_s == pytest.approx(L * 2e-5)
    assert b.step_s == est.step_time_s
    # The step: attention's roofline, then the weights', then the fixed cost.
    want = max(4 * B * S * N * H * L / (C * 0.6), B * S * 2 * L * K * H * 2 / (W * 0.8)) + \
        max(2 * B * counts.matmul_params(cfg) / (C * 0.6), read / (W * 0.7)) + L * 2e-5
    assert est.step_time_s == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("preset, B", [("llama-3.1-8b", 1), ("llama-3.1-8b", 64),
                                       ("llama-3.2-1b", 8), ("gpt2", 8)])
def test_a_step_reads_its_tokens_rows_of_the_embedding_not_the_table(preset, B):
    """Untied: B of the V rows. Tied: the table is the unembedding too, read whole. GPT-2's
    learned positions: B of its rows as well."""
    cfg, chip = get_preset(preset), get_chip("A100 80GB")
    est = estimate(cfg, chip, batch=B, context=128, efficiency="ideal")
    unread = 0 if cfg.tied_embeddings else (cfg.V - B) * cfg.D
    if cfg.positions == "learned":
        unread += (cfg.max_seq_len - B) * cfg.D
    assert est.weight_bytes_read == pytest.approx(2 * (params.param_count(cfg) - unread))
    assert (unread > 0) == (preset != "llama-3.2-1b")


def test_fp8_arithmetic_halves_a_compute_bound_prefill_on_a_hopper():
    cfg, chip = get_preset("llama-2-7b"), get_chip("H100 SXM")
    args = dict(batch=8, context=4096, weights="fp8", efficiency="ideal")
    bf16, fp8 = (estimate(cfg, chip, compute=c, **args) for c in ("bf16", "fp8"))
    flops = counts.forward_flops(cfg, 8, 4096, 4096, logits_for=1)
    assert bf16.prefill_time_s == pytest.approx(flops / chip.bf16_flops_per_s, rel=1e-12)
    assert fp8.prefill_time_s == pytest.approx(flops / chip.fp8_flops_per_s, rel=1e-12)
    assert fp8.compute == "fp8" and fp8.critical_batch == pytest.approx(
        2 * bf16.critical_batch)


def test_mbu_and_mfu_replace_the_fractions():
    """A one-token step reads; a long prefill computes: each slows by its fraction."""
    cfg, chip = get_preset("llama-2-7b"), get_chip("A100 80GB")
    ideal = estimate(cfg, chip, batch=1, context=4096, efficiency="ideal")
    half = estimate(cfg, chip, batch=1, context=4096, efficiency="ideal", mbu=0.5, mfu=0.25)
    assert half.step_time_s == pytest.approx(2 * ideal.step_time_s, rel=1e-12)
    assert half.prefill_time_s == pytest.approx(4 * ideal.prefill_time_s, rel=1e-12)
    assert (half.mbu, half.mfu) == (0.5, 0.25)
    calibrated = estimate(cfg, chip, batch=1, context=4096, mbu=0.5)
    assert calibrated.mbu == 0.5 and calibrated.efficiency.startswith("calibrated")


def test_a_prefills_collectives_add_to_its_work_unless_they_overlap():
    cfg, chip = get_preset("llama-3.1-70b"), get_chip("H100 SXM")
    B, T, n = 4, 2048, 8
    args = dict(batch=B, context=T, prompt=T, chips=n, layout="1d-ws", efficiency="ideal")
    on, off = (estimate(cfg, chip, prefill_overlap=o, **args) for o in (True, False))
    c = layout_comms(cfg, chip, n, B, T, "1d-ws")
    work = on.prefill_time_s - c.latency_s             # compute-bound: the work is the max
    assert work > c.bandwidth_s
    assert off.prefill_time_s == pytest.approx(work + c.bandwidth_s + c.latency_s, rel=1e-9)
    assert (on.prefill_overlap, off.prefill_overlap) == (True, False)
    # The calibrated default for GPUs: NCCL's all-reduces wait between the matmuls.
    assert estimate(cfg, chip, **{**args, "efficiency": "calibrated"}).prefill_overlap is False


def test_the_calibrated_estimate_is_never_faster_than_the_bare_roofline():
    for preset, chip_name, n, B in [("llama-3.1-8b", "H100 SXM", 1, 1),
                                    ("llama-3.1-70b", "TPU v5e", 16, 64),
                                    ("mixtral-8x7b", "A100 80GB", 4, 32),
                                    ("deepseek-v2-lite", "H200", 2, 8)]:
        cfg, chip = get_preset(preset), get_chip(chip_name)
        ideal, real = (estimate(cfg, chip, batch=B, context=2048, prompt=512, chips=n,
                                efficiency=e) for e in ("ideal", "calibrated"))
        assert real.step_time_s >= ideal.step_time_s and \
            real.prefill_time_s >= ideal.prefill_time_s


def test_expert_parallelism_is_chosen_when_its_step_is_fastest():
    """Mixtral on eight H100s: tensor parallelism at batch 8, expert parallelism at 4,096,
    where the all-reduces of every token outweigh each group's copy of the attention."""
    cfg, chip = get_preset("mixtral-8x7b"), get_chip("H100 SXM")
    for B, layout in [(8, "1d-ws"), (4096, "expert-parallel")]:
        auto = estimate(cfg, chip, batch=B, context=2048, chips=8, efficiency="ideal")
        forced = {lay: estimate(cfg, chip, batch=B, context=2048, chips=8, layout=lay,
                                efficiency="ideal").step_time_s
                  for lay in ("1d-ws", "expert-parallel")}
        assert auto.layout == layout and auto.step_time_s == min(forced.values())
    ep = estimate(cfg, chip, batch=4096, context=2048, chips=8, efficiency="ideal",
                  layout="expert-parallel")
    Z = ep.expert_chips
    experts = quant.weight_bytes(cfg, "bf16", ("expert",))
    held = Z * (ep.param_bytes - experts) + experts        # a copy of the rest per group
    assert ep.total_bytes == pytest.approx(held + ep.kv_bytes, rel=1e-12)
