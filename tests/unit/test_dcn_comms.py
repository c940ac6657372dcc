"""The estimate's second tier: collectives that cross hosts, against first-principles arithmetic.

Every expected figure here is written out from the hierarchical algorithm (reduce-scatter in
the host, all-reduce of the 1/h share between hosts, all-gather in the host), the chip's
datasheet figures and the placement of a row-major mesh on hosts, not by calling the code
under test; the estimator's step over two hosts is rebuilt from the layout's inventory the
same way.
"""

import pytest

from inferbook.cli import main
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.perf import dcn_comms
from inferbook.perf.collectives import Comm, wire_bytes, ws1d_collectives, ws2d_collectives
from inferbook.perf.estimate_inputs import EstimateInputError
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import get_chip
from inferbook.perf.layout_comms import layout_comms

H100 = get_chip("H100 SXM")
NVLINK = H100.link_bytes_per_s * H100.links            # one chip into a switched collective
NIC = 400e9 / 8                                        # DGX H100: one 400 Gb/s NIC per GPU
NET_STEP = 2.7e-6                                      # NCCL's ring step over the network


def nvlink_pass(g):
    """NCCL's ring/LL pass over g NVLink GPUs: 3.6 µs + 0.47 µs a further GPU."""
    return 3.6e-6 + (g - 1) * 0.47e-6


@pytest.mark.parametrize("group, stride, per_host, expected", [
    (16, 1, 8, (8, 2)),        # the whole mesh over two hosts
    (4, 1, 8, (4, 1)),         # a trailing axis of 4 inside a host
    (2, 8, 8, (1, 2)),         # X of a 2x8 mesh: one chip on each host
    (4, 4, 8, (2, 2)),         # X of a 4x4 mesh on hosts of 8: rows 0-1, rows 2-3
    (8, 2, 4, (2, 4)),
])
def test_where_a_group_of_a_row_major_mesh_lies(group, stride, per_host, expected):
    assert dcn_comms.host_split(group, stride, per_host) == expected


def test_a_group_that_does_not_line_up_with_the_hosts_is_refused():
    with pytest.raises(ValueError, match="does not line up"):
        dcn_comms.host_split(3, 3, 8)


@pytest.mark.parametrize("kind", ["all-reduce", "all-gather", "reduce-scatter", "all-to-all"])
@pytest.mark.parametrize("h, m", [(8, 2), (4, 4), (1, 8), (8, 1)])
def test_the_hierarchy_sends_the_flat_rings_bytes_with_a_1_over_h_share_on_the_dcn(kind, h, m):
    A, g = 3 * 2 ** 20, h * m
    phases = dcn_comms.host_phases(kind, A, h, m)
    sent = {tier: sum(wire_bytes(k, b, n) for t, k, b, n in phases if t == tier)
            for tier in ("host", "dcn")}
    assert sent["host"] + sent["dcn"] == pytest.approx((2 if kind == "all-reduce" else 1)
                                                       * A * (g - 1) / g)
    dcn = {"all-reduce": 2 * (m - 1) / m * A / h, "all-gather": (m - 1) / m * A / h,
           "reduce-scatter": (m - 1) / m * A / h, "all-to-all": (m - 1) / m * A}[kind]
    assert sent["dcn"] == pytest.approx(dcn)


def test_an_allreduce_over_two_h100_servers_from_the_datasheets():
    """16 GPUs, 8 to a server, an AllReduce of 1 MB: ReduceScatter and AllGather of 1 MB
    over NVLink's 18 links of 25 GB/s, an AllReduce of the 1/8 share between the two servers
    over each GPU's 50 GB/s NIC; two NVLink passes over 8 GPUs (NCCL: 3.6 µs + 7 steps of
    0.47 µs), two network passes of one ring step of 2.7 µs each (two hosts)."""
    A = 1e6
    t = dcn_comms.two_tier_time(Comm("x", "x", "all-reduce", 16, A), H100, 8)
    nvlink_bytes = 2 * (7 / 8) * A
    net_bytes = 2 * (1 / 2) * (A / 8)
    assert t.bandwidth_s == pytest.approx(nvlink_bytes / NVLINK + net_bytes / NIC)
    assert t.latency_s == pytest.approx(2 * (3.6e-6 + 7 * 0.47e-6) + 2 * 1 * NET_STEP)
    assert t.passes == 4 and t.dcn_passes == 2
    assert t.dcn_bytes == pytest.approx(net_bytes)
    assert t.dcn_bandwidth_s == pytest.approx(net_bytes / NIC)
    assert t.dcn_latency_s == pytest.approx(2 * NET_STEP)


def hand_priced(comm, per_host, hosts, count=None):
    """One collective of the inventory priced from the formulas of dcn_comms' docstring."""
    A, h, m, n = comm.bytes, per_host, hosts, count or comm.count
    if comm.group <= 1:
        return 0.0, 0.0
    passes = 2 if comm.kind == "all-reduce" else 1
    if m == 1:
        return n * wire_bytes(comm.kind, A, h) / NVLINK, n * passes * nvlink_pass(h)
    host_bytes = {"all-reduce": 2 * (h - 1) / h * A, "all-gather": (h - 1) / h * A,
                  "reduce-scatter": (h - 1) / h * A,
                  "all-to-all": (h - 1) / (h * m) * A}[comm.kind]
    net_bytes = {"all-reduce": 2 * (m - 1) / m * A / h, "all-gather": (m - 1) / m * A / h,
                 "reduce-scatter": (m - 1) / m * A / h, "all-to-all": (m - 1) / m * A}[comm.kind]
    host_passes = passes if h > 1 else 0
    return (n * (host_bytes / NVLINK + net_bytes / NIC),
            n * (host_passes * nvlink_pass(h) + passes * (m - 1) * NET_STEP))


def test_the_estimators_1d_step_over_two_servers_is_its_inventory_priced_by_hand():
    cfg = get_preset("llama-3-70b")
    row = estimate(cfg, H100, batch=32, context=2048, chips=16, layout="1d-ws",
                   chips_per_host=8, efficiency="ideal")
    bw = lat = 0.0
    for c in ws1d_collectives(cfg, 32, 1, 16):
        b, t = hand_priced(c, *((8, 2) if c.group == 16 else (c.group, 1)))
        bw, lat = bw + b, lat + t
    assert row.comm_time_s == pytest.approx(bw + lat)
    assert row.chips_per_host == 8 and 0 < row.dcn_time_s < row.comm_time_s


def test_the_2d_layouts_x_groups_leave_the_host_first():
    """On 2 hosts of 8 with X = 2, YZ = 8, every collective over X pairs a chip with its twin
    on the other host: all of it crosses the network; those over YZ stay home."""
    cfg = ModelConfig(L=4, D=4096, F=16384, N=32, K=8, H=128, V=32000, name="dense")
    priced = dcn_comms.hosts_layout_comms(cfg, H100, 16, 8, 16, 1, "2d-ws", X=2)
    comms = ws2d_collectives(cfg, 16, 1, 2, 8)
    assert {c.scope for c in comms if c.group == 2} == dcn_comms.WS2D_X_SCOPES
    expected = sum(c.count * wire_bytes(c.kind, c.bytes, 2) for c in comms if c.group == 2)
    expected += sum(c.count * 2 * (1 / 2) * c.bytes / 8 for c in comms
                    if c.group == 16 and c.kind == "all-reduce")
    assert priced.dcn_bytes_sent == pytest.approx(expected)


@pytest.mark.parametrize("layout", ["1d-ws", "2d-ws"])
def test_inside_one_host_nothing_changes(layout):
    cfg = get_preset("llama-2-13b")
    one = dcn_comms.priced_layout(cfg, H100, 8, 8, 1, layout, 2 if layout == "2d-ws" else 1)
    assert one == layout_comms(cfg, H100, 8, 8, 1, layout, 2 if layout == "2d-ws" else 1)
    assert estimate(cfg, H100, batch=8, chips=8, chips_per_host=8).as_dict() | \
        {"chips_per_host": None} == estimate(cfg, H100, batch=8, chips=8).as_dict()


def test_only_the_chips_beyond_one_host_pay_the_network():
    cfg = get_preset("llama-3-70b")
    rows = [estimate(cfg, H100, batch=16, context=4096, chips=n, layout="1d-ws",
                     chips_per_host=8) for n in (4, 8, 16, 32)]
    assert [r.dcn_time_s > 0 for r in rows] == [False, False, True, True]
    assert rows[2].comm_time_s > rows[1].comm_time_s


# (CLI text, library value, hardware, words): each door refuses alike (test_estimate_inputs).
HOST_CASES = [
    ("0", 0, "H100", "0 is out of range"),
    ("12", 12, "H100", "12 chips exceed the 8 that one NVLink 4 domain of H100 SXM joins"),
    ("3", 3, "H100", "16 chips do not fill whole hosts of 3"),
    ("8", 8, "L4", "L4 has no data-centre network figures"),
]


@pytest.mark.parametrize("text, value, hardware, words", HOST_CASES)
def test_bad_hosts_are_refused_alike_by_the_library_and_the_command(capsys, text, value,
                                                                    hardware, words):
    with pytest.raises(EstimateInputError) as refused:
        estimate(get_preset("llama-3-70b"), get_chip(hardware), chips=16, context=1024,
                 chips_per_host=value)
    assert refused.value.name == "chips_per_host" and words in refused.value.problem
    code = main(["estimate", "--model", "llama-3-70b", "--hardware", hardware, "--chips", "16",
                 "--context", "1024", "--chips-per-host", text])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == [f"inferbook estimate: error: --chips-per-host: "
                                f"{refused.value.problem}"]


def test_the_command_prints_the_hosts_and_their_share_of_the_step(capsys):
    assert main(["estimate", "--model", "llama-3-70b", "--hardware", "H100", "--chips", "32",
                 "--chips-per-host", "8", "--batch", "64", "--context", "4096"]) == 0
    out = capsys.readouterr().out
    assert "32 × H100 SXM in 4 hosts of 8" in out and "of which between hosts" in out


def test_an_efficiency_prices_the_network_as_every_other_collective():
    """Under an efficiency the DCN's bandwidth time is divided by its link fraction and each
    DCN pass pays its software cost, as on the interconnect: the 1D step over two servers,
    its network share rebuilt from the inventory by hand."""
    from inferbook.perf.efficiency import Efficiency
    cfg = get_preset("llama-3-70b")
    eff = Efficiency(link=0.5, pass_overhead_s=1e-5, name="test")
    row = estimate(cfg, H100, batch=32, context=2048, chips=16, layout="1d-ws",
                   chips_per_host=8, efficiency=eff)
    net_bw = net_lat = net_passes = 0.0
    for c in ws1d_collectives(cfg, 32, 1, 16):
        if c.group == 16:
            passes = (2 if c.kind == "all-reduce" else 1) * c.count
            share = {"all-reduce": 2 * (1 / 2) * c.bytes / 8}.get(c.kind, (1 / 2) * c.bytes / 8)
            net_bw, net_lat = net_bw + c.count * share / NIC, net_lat + passes * NET_STEP
            net_passes += passes
    assert row.dcn_time_s == pytest.approx(net_bw / 0.5 + net_lat + net_passes * 1e-5)
    assert row.breakdown.dcn_s == row.dcn_time_s < row.breakdown.communication_s


def test_expert_parallel_sends_its_alltoalls_between_hosts():
    """Experts over Z = 8 spaced Y = 2 apart on hosts of 8: each AllToAll spans 2 hosts, 4 of
    its chips on each, and sends half of its buffer over the network; the 1D collectives over
    Y stay in the host."""
    from inferbook.perf.collectives import expert_parallel_collectives
    cfg = get_preset("mixtral-8x7b")
    priced = dcn_comms.hosts_layout_comms(cfg, H100, 16, 8, 16, 1, "expert-parallel", X=2)
    comms = expert_parallel_collectives(cfg, 16, 1, 8, 2, kv_heads=2)
    assert {c.scope for c in comms if c.group == 8} == dcn_comms.EP_Z_SCOPES
    expected = sum(c.count * (1 / 2) * c.bytes for c in comms if c.group == 8)
    assert priced.dcn_bytes_sent == pytest.approx(expected)


def test_the_hosts_combine_with_every_flag_of_the_command(capsys):
    argv = ["estimate", "--model", "llama-3-70b", "--hardware", "H100", "--chips", "16",
            "--chips-per-host", "8", "--batch", "32", "--context", "4096", "--prompt", "1024",
            "--output", "128", "--price", "2.5", "--mbu", "0.7", "--mfu", "0.5",
            "--compute", "fp8", "--prefill-overlap", "off", "--breakdown"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "16 × H100 SXM in 2 hosts of 8" in out and out.count("of which between hosts") == 2
    assert main(argv + ["--ideal", "--batch", "16,32"]) == 0
    out = capsys.readouterr().out
    assert "dcn ms" in out and "in 2 hosts of 8" in out
