"""The registry's figures, each re-derived here from the number its datasheet prints.

Datasheets print a figure one of four ways: per chip and dense (kept as printed), per chip and
2:4-sparse (halved), per server or per superchip (divided by the GPUs it holds), or as a port
rate in Gb/s (divided by 8). Each row below is the printed number and the way it is printed;
the test redoes the conversion by hand and compares it with `CHIPS`.
"""

import dataclasses
import math

import pytest

from inferbook.perf import hardware
from inferbook.perf.chip import dense_from_sparse, gbit_per_s
from inferbook.perf.hardware import CHIPS, HardwareError, chip_for_device, chip_from_json, get_chip

# (chip, field, printed figure, GPUs the figure covers, printed as sparse)
PRINTED = [
    # NVIDIA HGX B200 specifications: per 8-GPU board, sparse.
    ("B200", "bf16_flops_per_s", 36e15, 8, True),
    ("B200", "fp8_flops_per_s", 72e15, 8, True),
    ("B200", "fp4_flops_per_s", 144e15, 8, True),
    ("B200", "int8_ops_per_s", 72e15, 8, True),
    # DGX B200 datasheet: 1,440 GB at 64 TB/s over 8 GPUs.
    ("B200", "hbm_bytes", 1440e9, 8, False),
    ("B200", "hbm_bytes_per_s", 64e12, 8, False),
    # GB200 NVL72 datasheet, the GB200 superchip column (two GPUs), sparse.
    ("GB200", "bf16_flops_per_s", 10e15, 2, True),
    ("GB200", "fp8_flops_per_s", 20e15, 2, True),
    ("GB200", "fp4_flops_per_s", 40e15, 2, True),
    ("GB200", "int8_ops_per_s", 20e15, 2, True),
    ("GB200", "hbm_bytes", 372e9, 2, False),
    ("GB200", "hbm_bytes_per_s", 16e12, 2, False),
    # AMD Instinct MI300X data sheet: per GPU, dense as printed.
    ("MI300X", "bf16_flops_per_s", 1307.4e12, 1, False),
    ("MI300X", "fp8_flops_per_s", 2614.9e12, 1, False),
    ("MI300X", "int8_ops_per_s", 2614.9e12, 1, False),
    ("MI300X", "hbm_bytes", 192e9, 1, False),
    ("MI300X", "hbm_bytes_per_s", 5.3e12, 1, False),
    # Intel Gaudi 3 white paper: per card.
    ("Gaudi 3", "bf16_flops_per_s", 1835e12, 1, False),
    ("Gaudi 3", "fp8_flops_per_s", 1835e12, 1, False),
    ("Gaudi 3", "hbm_bytes", 128e9, 1, False),
    ("Gaudi 3", "hbm_bytes_per_s", 3.7e12, 1, False),
    # NVIDIA H100 / H200 / L4 datasheets: per GPU, sparse.
    ("H100 SXM", "bf16_flops_per_s", 1979e12, 1, True),
    ("H100 SXM", "fp8_flops_per_s", 3958e12, 1, True),
    ("H100 SXM", "int8_ops_per_s", 3958e12, 1, True),
    ("H200", "fp8_flops_per_s", 3958e12, 1, True),
    ("L4", "fp8_flops_per_s", 485e12, 1, True),
    ("L4", "int8_ops_per_s", 485e12, 1, True),
]


@pytest.mark.parametrize("chip, field, printed, gpus, sparse", PRINTED)
def test_each_figure_is_its_datasheets_number_converted(chip, field, printed, gpus, sparse):
    expected = printed / gpus / (2 if sparse else 1)
    assert getattr(CHIPS[chip], field) == pytest.approx(expected, rel=1e-12)


def test_a_dense_figure_is_half_the_sparse_one_where_a_datasheet_prints_both():
    # AMD prints both for the MI300X: 1,307.4 dense and 2,614.9 sparse TFLOPS of bf16 (the
    # sparse figure rounded on its own, so the two agree to the printed digits).
    assert dense_from_sparse(2614.9e12) == pytest.approx(CHIPS["MI300X"].bf16_flops_per_s,
                                                         abs=0.1e12)
    # NVIDIA prints both for the A10: 125 dense, 250 sparse.
    assert dense_from_sparse(250e12) == CHIPS["A10"].bf16_flops_per_s


@pytest.mark.parametrize("chip, link_GB_s_both_ways, links", [
    ("B200", 1800 / 18, 18), ("GB200", 1800 / 18, 18),      # NVLink 5: 1.8 TB/s over 18 links
    ("H100 SXM", 900 / 18, 18),                             # NVLink 4: 900 GB/s over 18
    ("MI300X", 128, 7),                                     # 7 Infinity Fabric links of 128
])
def test_link_bandwidth_is_one_direction_of_one_link(chip, link_GB_s_both_ways, links):
    c = CHIPS[chip]
    assert c.links == links
    assert c.link_bytes_per_s == pytest.approx(link_GB_s_both_ways * 1e9 / 2)
    assert c.interconnect_bytes_per_s == pytest.approx(links * link_GB_s_both_ways * 1e9 / 2)


def test_gaudi_3_joins_its_board_with_21_ethernet_ports_and_leaves_it_with_3():
    c = CHIPS["Gaudi 3"]
    assert gbit_per_s(200) == 25e9                          # 200 Gb/s is 25 GB/s
    assert (c.links, c.link_bytes_per_s) == (21, 25e9)
    assert c.links + c.dcn_bytes_per_s / c.link_bytes_per_s == 24   # the chip's 24 ports
    assert c.hop_latency_s is None                          # Intel publishes none


@pytest.mark.parametrize("chip, gbits", [("H100 SXM", 400), ("H200", 400), ("B200", 400),
                                         ("A100 80GB", 200), ("A100 40GB", 200)])
def test_a_dgx_gives_each_gpu_one_nic(chip, gbits):
    assert CHIPS[chip].dcn_bytes_per_s == gbits * 1e9 / 8


@pytest.mark.parametrize("chip, host_chips", [("TPU v4", 4), ("TPU v5p", 4), ("TPU v5e", 8),
                                              ("TPU v6e", 8)])
def test_a_tpu_hosts_network_is_shared_by_its_chips(chip, host_chips):
    # The scaling book, part 2: about 2.5e10 B/s of data-centre network per host; a host
    # holds a 2x2x1 tray of v4 / v5p chips, a 4x2 of v5e / v6e. No latency is given.
    assert CHIPS[chip].dcn_bytes_per_s == 2.5e10 / host_chips
    assert CHIPS[chip].dcn_latency_s is None


def test_a_message_between_gpu_servers_costs_nccls_network_step():
    # NCCL's cost model: 2.7 µs per ring step over the network (LL protocol).
    for name in ("H100 SXM", "H200", "B200", "A100 80GB", "A100 40GB"):
        assert CHIPS[name].dcn_latency_s == 2.7e-6 and CHIPS[name].dcn_bytes_per_s
    for name in ("L4", "A10", "GB200", "MI300X", "Gaudi 3"):       # no source gives one
        assert CHIPS[name].dcn_latency_s is None


def test_the_nvlink_pass_latency_is_nccls_ring_over_eight_gpus():
    # NCCL's ring/LL model: 3.6 µs a collective + 0.47 µs per step, 7 steps over 8 GPUs
    # (6.89 µs, kept to the tenth of a microsecond).
    for name in ("H100 SXM", "H200", "B200", "GB200"):
        assert CHIPS[name].hop_latency_s == pytest.approx((3.6 + 7 * 0.47) * 1e-6, abs=5e-8)
    # RCCL's first tuning table: 12 µs + 0.8 µs per step.
    assert CHIPS["MI300X"].hop_latency_s == pytest.approx((12 + 7 * 0.8) * 1e-6)


@pytest.mark.parametrize("name", sorted(CHIPS))
def test_every_chip_is_sourced_and_its_figures_are_ordered(name):
    c = CHIPS[name]
    assert c.source and c.max_chips
    low_precision = [v for v in (c.int8_ops_per_s, c.fp8_flops_per_s, c.fp4_flops_per_s)
                     if v is not None]
    assert all(v >= c.bf16_flops_per_s for v in low_precision)
    if c.fp4_flops_per_s is not None:
        assert c.fp4_flops_per_s == 2 * c.fp8_flops_per_s
    for value in dataclasses.asdict(c).values():
        if isinstance(value, float):
            assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("typed, name", [("b200", "B200"), ("GB200", "GB200"),
                                         ("mi300x", "MI300X"), ("gaudi3", "Gaudi 3"),
                                         ("Gaudi 3", "Gaudi 3"), ("gaudi-3", "Gaudi 3")])
def test_new_chips_answer_to_the_names_people_type(typed, name):
    assert get_chip(typed).name == name


@pytest.mark.parametrize("kind, name", [("NVIDIA B200", "B200"), ("NVIDIA GB200", "GB200"),
                                        ("AMD Instinct MI300X", "MI300X"),
                                        ("NVIDIA H200", "H200")])
def test_a_device_kind_finds_its_chip(kind, name):
    assert chip_for_device(kind).name == name


def test_a_custom_chip_may_give_the_new_fields_and_they_are_checked():
    chip = chip_from_json({"hbm_bytes": 1e9, "hbm_bandwidth": 1e12, "flops": 1e14,
                           "fp8_flops_per_s": 2e14, "dcn_bytes_per_s": 5e10})
    assert (chip.fp8_flops_per_s, chip.fp4_flops_per_s, chip.dcn_bytes_per_s) == \
        (2e14, None, 5e10)
    with pytest.raises(HardwareError, match="fp4_flops_per_s"):
        chip_from_json({"hbm_bytes": 1e9, "hbm_bandwidth": 1e12, "flops": 1e14,
                        "fp4_flops_per_s": -1})


def test_the_registry_module_still_offers_its_public_names():
    for name in hardware.__all__:
        assert hasattr(hardware, name)
