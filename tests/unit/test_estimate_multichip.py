"""The estimator on many chips, against the sharding chapters' collectives.

`perf.collectives` lists what the 1D and 2D layouts send, and tests/unit/test_hlo.py holds
that list byte for byte against the compiled programs. Here each collective is priced by hand
— ring algorithms, (n-1)/n of the array per pass, two passes for an AllReduce; per pass m/2
hops around each ring of m chips a group forms on the torus axes it spans, or through a
switch NCCL's 3.6 µs plus the per-step cost for each chip after the first — and the
estimator's bare-roofline step time must be the roofline joined to that communication, on
four chips × three chip counts × both layouts.
"""

import dataclasses
import math

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf import collectives, comm_time, counts, hlo, latency
from inferbook.perf.collectives import wire_bytes
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import CHIPS, get_chip
from inferbook.perf.layout_comms import layout_comms
from inferbook.perf.step_cost import step_time

B, S = 16, 4096


def ring_hops(n, axes):
    """Hops of one pass over a power-of-two group of n chips on `axes` torus axes: its
    log2(n) doublings dealt out over the axes as evenly as they go, a ring of 2^e chips on
    an axis taking 2^e / 2 hops."""
    k = int(math.log2(n))
    assert 2 ** k == n
    exponents = [k // axes + (1 if i < k % axes else 0) for i in range(axes)]
    return sum(2 ** e / 2 for e in exponents if e > 0)


def pass_latency(chip, n, axes):
    if chip.interconnect == "ICI":
        return chip.hop_latency_s * ring_hops(n, axes)
    return 3.6e-6 + (n - 1) * {"L4": 1.0e-6, "A10": 1.0e-6}.get(chip.name, 0.47e-6)


def priced(comms, chip, axes_of):
    """(bandwidth s, latency s) of an inventory: each collective's wire bytes over the chip's
    bandwidth for its group, plus its fixed costs."""
    bw = lat = 0.0
    for c in comms:
        n = c.group
        if n == 1 or c.count == 0:
            continue
        passes = 2 if c.kind == "all-reduce" else 1
        if chip.interconnect == "ICI":
            W = 2 * chip.link_bytes_per_s * axes_of(n)
        else:
            W = chip.links * chip.link_bytes_per_s
        bw += c.count * passes * c.bytes * (n - 1) / n / W
        lat += c.count * passes * pass_latency(chip, n, axes_of(n))
    return bw, lat


def roofline(cfg, chip, n, batch):
    """The decode step's two parts: attention over the cache, then the matmul weights (the
    input embedding a lookup: B rows read, no FLOPs)."""
    P, W, C = counts.param_count(cfg), chip.hbm_bytes_per_s, chip.bf16_flops_per_s
    kv = counts.kv_cache_bytes(cfg, batch, S)
    table = cfg.V * cfg.D
    return (max(4 * batch * S * cfg.N * cfg.H * cfg.L / (n * C), kv / (n * W))
            + max(2 * batch * (P - table) / (n * C), 2 * (P - table + batch * cfg.D) / (n * W)))


def torus_axes(chip, group, limit=None):
    dims = chip.links // 2
    return max(1, min(dims if limit is None else limit, int(math.log2(group))))


@pytest.mark.parametrize("chip_name", ["TPU v5e", "TPU v5p", "H100 SXM", "L4"])
@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("layout", ["1d-ws", "2d-ws"])
def test_step_time_is_the_roofline_joined_to_the_layouts_collectives(chip_name, n, layout):
    cfg, chip = get_preset("llama-3-8b"), get_chip(chip_name)
    assert not cfg.tied_embeddings
    est = estimate(cfg, chip, batch=B, context=S, chips=n, layout=layout, efficiency="ideal")
    if layout == "1d-ws":
        comms = collectives.ws1d_collectives(cfg, B, 1, n)
        bw, lat = priced(comms, chip, lambda g: torus_axes(chip, g))
    else:
        X, YZ = est.layout_x, est.layout_yz
        assert X * YZ == n
        comms = collectives.ws2d_collectives(cfg, B, 1, X, YZ)
        axes = {X: 1, YZ: torus_axes(chip, YZ, chip.links // 2 - 1 if X > 1 else None),
                n: torus_axes(chip, n)} if chip.interconnect == "ICI" else {}
        bw, lat = priced(comms, chip, lambda g: axes.get(g, 1))
        # The split chosen is the best of the splits the layout can make at this batch.
        others = [estimate(cfg, chip, batch=B, context=S, chips=n, layout="2d-ws",
                           efficiency="ideal").step_time_s]
        for x in (d for d in range(1, n + 1) if n % d == 0):
            try:
                c = layout_comms(cfg, chip, n, B, 1, "2d-ws", x)
            except ValueError:
                continue
            others.append(max(roofline(cfg, chip, n, B), c.bandwidth_s) + c.latency_s)
        assert est.step_time_s == pytest.approx(min(others), rel=1e-12)
    assert est.comm_time_s == pytest.approx(bw + lat, rel=1e-12)
    assert est.step_time_s == pytest.approx(max(roofline(cfg, chip, n, B), bw) + lat, rel=1e-12)
    assert est.tokens_per_s_per_chip == pytest.approx(B / est.step_time_s / n, rel=1e-12)


@pytest.mark.parametrize("n", [2, 8, 64])
def test_the_1d_all_reduces_are_chapter_9s_closed_form(n):
    """Per layer, two AllReduces of [B, D]: 2 · ws1d_comm_time over one ring axis, less the
    (n-1)/n the closed form rounds up, on a TPU v5e (one torus axis for 2 chips)."""
    cfg, chip = get_preset("scaling-book-18b"), dataclasses.replace(get_chip("TPU v5e"), links=2)
    comms = [c for c in collectives.ws1d_collectives(cfg, B, 1, n) if c.scope in
             ("attn_out", "mlp_out")]
    bw, _ = priced(comms, chip, lambda g: 1)
    closed = cfg.L * 2 * comm_time.ws1d_comm_time(B, cfg.D, comm_time.ici_bandwidth(chip))
    assert bw == pytest.approx(closed * (n - 1) / n)


@pytest.mark.parametrize("kind", hlo.KINDS)
@pytest.mark.parametrize("n", [1, 2, 8])
def test_wire_bytes_follow_the_hlo_readers_convention(kind, n):
    c = hlo.Collective(kind=kind, name="x", dtype="f32", shapes=((8, 8),), bytes=256,
                       groups=(tuple(range(n)),))
    assert wire_bytes(kind, 256, n) == (c.wire_bytes if n > 1 else 0.0)   # one chip: no traffic


def test_more_chips_than_one_domain_or_indivisible_shapes_are_refused():
    cfg = get_preset("llama-3-70b")
    with pytest.raises(ValueError, match="domain"):
        estimate(cfg, get_chip("H100 SXM"), chips=16, context=1024)
    with pytest.raises(ValueError, match="split 3 ways"):
        estimate(cfg, get_chip("TPU v5e"), chips=3, context=1024)
    with pytest.raises(ValueError, match="2D layout"):
        estimate(get_preset("mixtral-8x7b"), get_chip("H100 SXM"), chips=2, context=1024,
                 layout="2d-ws")
    no_links = dataclasses.replace(get_chip("L4"), link_bytes_per_s=None)
    with pytest.raises(ValueError, match="link bandwidth"):
        estimate(cfg.replace(L=2), no_links, chips=2, context=1024)


@pytest.mark.parametrize("chip_name", ["H100 SXM", "H200", "L4", "A10"])
def test_kipplys_tensor_parallel_model_runs_on_every_chip_of_the_registry(chip_name):
    chip = CHIPS[chip_name]
    cfg = get_preset("llama-2-13b")
    est = step_time(latency.tensor_parallel_cost(cfg, chip, 4, 8, 2048), chip, 4)
    assert est > step_time(latency.tensor_parallel_cost(cfg, chip, 1, 8, 2048), chip) / 4


def test_latent_attention_keeps_a_whole_copy_of_the_latent_on_every_chip():
    cfg, chip = get_preset("deepseek-v2-lite"), get_chip("H100 SXM")
    one = estimate(cfg, chip, batch=4, context=2048, chips=1)
    two = estimate(cfg, chip, batch=4, context=2048, chips=2)
    assert two.kv_bytes == one.kv_bytes
    assert two.total_bytes - two.param_bytes == pytest.approx(2 * one.kv_bytes)
    assert counts.kv_bytes_per_token_per_shard(cfg, 2) == counts.kv_bytes_per_token(cfg)
