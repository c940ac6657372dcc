"""The registry's chips, each figure from its vendor's datasheet (the source beside it).

`inferbook.perf.hardware` turns this list into `CHIPS`, the one table every number in the book
is computed from. A figure the datasheet prints only as a sparse peak, a per-server total or
a rate in Gb/s is converted where it is written, with the printed number in the expression
(`dense_from_sparse(1e16 / 2)`: a GB200 superchip's 10 PFLOPS of sparse bfloat16, split over
its two GPUs, halved), and
`tests/unit/test_accelerators.py` repeats each conversion from the printed figures.
"""

from __future__ import annotations

from inferbook.perf.chip import Chip, dense_from_sparse, gbit_per_s

__all__ = ["ACCELERATORS"]

_TPU_DOCS = "Google Cloud TPU system architecture docs (cloud.google.com/tpu/docs/{v})"
_SCALING_ICI = ("; ICI one-way bandwidth per link and ~1 µs per hop from the scaling book, "
                "part 2 (Austin et al. 2025); pod size ({pod} chips) from the same docs; "
                "data-centre network (between slices): ~2.5e10 B/s per host over its {host} "
                "chips, from the same part of the scaling book, which gives no latency")
# The scaling book (part 2) puts a TPU host's data-centre network at about 2.5e10 B/s; a host
# holds 4 chips of TPU v4 and v5p (2x2x1) and 8 of v5e and v6e (4x2).
_TPU_HOST_DCN = 2.5e10
# NCCL's cost model (src/graph/tuning.cc) charges each ring step that crosses the network
# 2.7 µs (ring, LL protocol): the latency of one message between hosts over InfiniBand.
_NET_STEP = ("; one message between servers 2.7 µs: NCCL's cost model (src/graph/tuning.cc, "
             "a ring step over the network, LL protocol)")
# NVIDIA publishes no per-message latency. NCCL's own cost model (src/graph/tuning.cc, the
# ring algorithm with its low-latency "LL" protocol used for small messages) charges 3.6 µs per
# collective plus 0.47 µs per ring step over NVLink, 1.0 µs per step over PCIe: a pass over 8
# GPUs (7 steps) is 6.9 µs on NVLink and 10.6 µs on PCIe. The layouts' pricing grows it with
# the group (pass_latency_s + (g − 1) · step_latency_s, `comm_time.collective_pass_latency`);
# hop_latency_s keeps the pass over the server's 8 GPUs, the one latency of kipply's model.
_NVLINK_LAT = dict(pass_latency_s=3.6e-6, step_latency_s=0.47e-6)
_PCIE_LAT = dict(pass_latency_s=3.6e-6, step_latency_s=1.0e-6)
_NCCL = ("; message latency {lat}: NCCL's cost model (src/graph/tuning.cc, ring/LL over "
         "{link}) for a pass over the {n} GPUs of one server, 3.6 µs + {step} µs a ring step "
         "for a smaller or larger group")
_DGX_NIC = "; data-centre network: {system} gives each GPU one {rate} Gb/s ConnectX NIC"

_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (SXM4 {v}); 8 GPUs per NVLink domain: NVIDIA "
         "HGX A100; message latency 8 µs: kipply's estimate (Chen 2022) from NVLink "
         "measurements on the V100 (Jia et al. 2018); a collective pass over g GPUs: NCCL's "
         "cost model (src/graph/tuning.cc, ring/LL over NVLink), 3.6 µs + 0.47 µs a ring step"
         + _DGX_NIC.format(system="DGX A100",
                                                                        rate=200))

ACCELERATORS: tuple[Chip, ...] = (
    Chip("TPU v4", hbm_bytes=32e9, hbm_bytes_per_s=1.2e12, bf16_flops_per_s=2.75e14,
         int8_ops_per_s=2.75e14, interconnect="ICI", link_bytes_per_s=4.5e10, links=6,
         hop_latency_s=1e-6, max_chips=4096, dcn_bytes_per_s=_TPU_HOST_DCN / 4,
         source=_TPU_DOCS.format(v="v4") + _SCALING_ICI.format(pod=4096, host=4)),
    Chip("TPU v5e", hbm_bytes=16e9, hbm_bytes_per_s=8.19e11, bf16_flops_per_s=1.97e14,
         int8_ops_per_s=3.94e14, interconnect="ICI", link_bytes_per_s=4.5e10, links=4,
         hop_latency_s=1e-6, max_chips=256, dcn_bytes_per_s=_TPU_HOST_DCN / 8,
         source=_TPU_DOCS.format(v="v5e") + _SCALING_ICI.format(pod=256, host=8)),
    Chip("TPU v5p", hbm_bytes=95e9, hbm_bytes_per_s=2.765e12, bf16_flops_per_s=4.59e14,
         int8_ops_per_s=9.18e14, interconnect="ICI", link_bytes_per_s=9e10, links=6,
         hop_latency_s=1e-6, max_chips=8960, dcn_bytes_per_s=_TPU_HOST_DCN / 4,
         source=_TPU_DOCS.format(v="v5p") + _SCALING_ICI.format(pod=8960, host=4)),
    Chip("TPU v6e", hbm_bytes=32e9, hbm_bytes_per_s=1.64e12, bf16_flops_per_s=9.18e14,
         int8_ops_per_s=1.836e15, interconnect="ICI", link_bytes_per_s=9e10, links=4,
         hop_latency_s=1e-6, max_chips=256, dcn_bytes_per_s=_TPU_HOST_DCN / 8,
         source=_TPU_DOCS.format(v="v6e") + _SCALING_ICI.format(pod=256, host=8)),
    # NVIDIA H100 SXM5 datasheet: 1,979 TFLOPS bf16, 3,958 TFLOPS fp8 and 3,958 TOPS int8
    # *with sparsity*; NVLink 4: 18 links, 900 GB/s per GPU both directions together (25 GB/s
    # one way a link); an HGX H100 board joins 8 GPUs through NVSwitches.
    Chip("H100 SXM", hbm_bytes=80e9, hbm_bytes_per_s=3.35e12, bf16_flops_per_s=9.895e14,
         int8_ops_per_s=1.979e15, interconnect="NVLink 4", link_bytes_per_s=2.5e10, links=18,
         hop_latency_s=6.9e-6, **_NVLINK_LAT, max_chips=8,
         fp8_flops_per_s=dense_from_sparse(3.958e15),
         dcn_bytes_per_s=gbit_per_s(400), dcn_latency_s=2.7e-6,
         source="NVIDIA H100 Tensor Core GPU datasheet (SXM5); 8 GPUs per NVLink domain: "
                "NVIDIA HGX H100" + _NCCL.format(lat="6.9 µs", link="NVLink", n=8, step=0.47)
                + _DGX_NIC.format(system="DGX H100", rate=400) + _NET_STEP),
    # NVIDIA H200 datasheet: H100's compute with 141 GB of HBM3e at 4.8 TB/s.
    Chip("H200", hbm_bytes=141e9, hbm_bytes_per_s=4.8e12, bf16_flops_per_s=9.895e14,
         int8_ops_per_s=1.979e15, interconnect="NVLink 4", link_bytes_per_s=2.5e10, links=18,
         hop_latency_s=6.9e-6, **_NVLINK_LAT, max_chips=8,
         fp8_flops_per_s=dense_from_sparse(3.958e15),
         dcn_bytes_per_s=gbit_per_s(400), dcn_latency_s=2.7e-6,
         source="NVIDIA H200 Tensor Core GPU datasheet (SXM); 8 GPUs per NVLink domain: "
                "NVIDIA HGX H200" + _NCCL.format(lat="6.9 µs", link="NVLink", n=8, step=0.47)
                + _DGX_NIC.format(system="DGX H200", rate=400) + _NET_STEP),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, 624 TOPS int8 dense, no fp8; NVLink 3:
    # 12 links, 600 GB/s both directions together. NVIDIA publishes no per-message latency;
    # the 8 µs is kipply's estimate (Chen 2022), taken from Citadel's NVLink microbenchmarks
    # on the V100 (Jia et al. 2018), and the figure her latency model uses.
    Chip("A100 40GB", hbm_bytes=40e9, hbm_bytes_per_s=1.555e12, bf16_flops_per_s=3.12e14,
         int8_ops_per_s=6.24e14, interconnect="NVLink 3", link_bytes_per_s=2.5e10, links=12,
         hop_latency_s=8e-6, **_NVLINK_LAT, max_chips=8, dcn_bytes_per_s=gbit_per_s(200),
         dcn_latency_s=2.7e-6, source=_A100.format(v="40GB") + _NET_STEP),
    Chip("A100 80GB", hbm_bytes=80e9, hbm_bytes_per_s=2.039e12, bf16_flops_per_s=3.12e14,
         int8_ops_per_s=6.24e14, interconnect="NVLink 3", link_bytes_per_s=2.5e10, links=12,
         hop_latency_s=8e-6, **_NVLINK_LAT, max_chips=8, dcn_bytes_per_s=gbit_per_s(200),
         dcn_latency_s=2.7e-6, source=_A100.format(v="80GB") + _NET_STEP),
    # NVIDIA L4 datasheet: 242 TFLOPS bf16, 485 TFLOPS fp8 and 485 TOPS int8 with sparsity;
    # PCIe only (PCIe Gen4 x16, 64 GB/s both directions). Servers hold up to 8 (Google
    # Cloud's g2-standard-96).
    Chip("L4", hbm_bytes=24e9, hbm_bytes_per_s=3.0e11, bf16_flops_per_s=1.21e14,
         int8_ops_per_s=2.425e14, interconnect="PCIe 4.0 x16", link_bytes_per_s=3.2e10, links=1,
         hop_latency_s=1.06e-5, **_PCIE_LAT, max_chips=8,
         fp8_flops_per_s=dense_from_sparse(4.85e14),
         source="NVIDIA L4 Tensor Core GPU datasheet; 8 per server: Google Cloud G2 machine "
                "types" + _NCCL.format(lat="10.6 µs", link="PCIe", n=8, step=1.0)),
    # NVIDIA A10 datasheet: 125 TFLOPS bf16 (250 sparse), 250 TOPS int8 (500 sparse);
    # PCIe Gen4 x16. PCIe servers hold up to 8 (AWS's g5.48xlarge: eight A10G, its cloud
    # variant).
    Chip("A10", hbm_bytes=24e9, hbm_bytes_per_s=6.0e11, bf16_flops_per_s=1.25e14,
         int8_ops_per_s=2.5e14, interconnect="PCIe 4.0 x16", link_bytes_per_s=3.2e10, links=1,
         hop_latency_s=1.06e-5, **_PCIE_LAT, max_chips=8,
         source="NVIDIA A10 Tensor Core GPU datasheet; 8 per PCIe server, as AWS G5 "
                "instances hold eight A10G"
                + _NCCL.format(lat="10.6 µs", link="PCIe", n=8, step=1.0)),
    # NVIDIA HGX B200 (8 GPUs at 1,000 W), whose specification prints per-board sparse peaks:
    # 36 PFLOPS bf16, 72 PFLOPS fp8, 144 PFLOPS fp4, 72 POPS int8; DGX B200 datasheet: 1,440 GB
    # of HBM3e at 64 TB/s over the 8 GPUs. NVLink 5: 18 links, 1.8 TB/s per GPU both ways.
    Chip("B200", hbm_bytes=1.44e12 / 8, hbm_bytes_per_s=6.4e13 / 8,
         bf16_flops_per_s=dense_from_sparse(3.6e16 / 8),
         int8_ops_per_s=dense_from_sparse(7.2e16 / 8),
         fp8_flops_per_s=dense_from_sparse(7.2e16 / 8),
         fp4_flops_per_s=dense_from_sparse(1.44e17 / 8),
         interconnect="NVLink 5", link_bytes_per_s=1.8e12 / 2 / 18, links=18,
         hop_latency_s=6.9e-6, **_NVLINK_LAT, max_chips=8, dcn_bytes_per_s=gbit_per_s(400),
         dcn_latency_s=2.7e-6,
         source="NVIDIA HGX B200 specifications (per 8-GPU board, sparse peaks halved) and "
                "DGX B200 datasheet (memory and bandwidth over 8 GPUs); 8 GPUs per NVLink "
                "domain" + _NCCL.format(lat="6.9 µs", link="NVLink", n=8, step=0.47)
                + _DGX_NIC.format(system="DGX B200", rate=400) + _NET_STEP),
    # One Blackwell GPU of a GB200 superchip (two GPUs and a Grace CPU, at 1,200 W a GPU: more
    # arithmetic than the HGX B200's). GB200 NVL72 datasheet, per superchip: 10 PFLOPS bf16,
    # 20 PFLOPS fp8, 40 PFLOPS fp4 and 20 POPS int8 (sparse), 372 GB of HBM3e at 16 TB/s; one
    # NVLink domain of 72 GPUs. In NCCL's model a pass over all 72 costs 3.6 + 71 · 0.47 =
    # 37 µs, the layouts' pricing says so; hop_latency_s keeps the 8-GPU pass of kipply's model.
    Chip("GB200", hbm_bytes=3.72e11 / 2, hbm_bytes_per_s=1.6e13 / 2,
         bf16_flops_per_s=dense_from_sparse(1e16 / 2),
         int8_ops_per_s=dense_from_sparse(2e16 / 2),
         fp8_flops_per_s=dense_from_sparse(2e16 / 2),
         fp4_flops_per_s=dense_from_sparse(4e16 / 2),
         interconnect="NVLink 5", link_bytes_per_s=1.8e12 / 2 / 18, links=18,
         hop_latency_s=6.9e-6, **_NVLINK_LAT, max_chips=72,
         source="NVIDIA GB200 NVL72 datasheet (per GB200 superchip of two GPUs, sparse peaks "
                "halved); 72 GPUs per NVLink domain" + _NCCL.format(lat="6.9 µs",
                                                                    link="NVLink", n=8, step=0.47)),
    # AMD Instinct MI300X data sheet: 192 GB HBM3 at 5.3 TB/s; 1,307.4 TFLOPS bf16 dense
    # (2,614.9 sparse), 2,614.9 TFLOPS fp8 and 2,614.9 TOPS int8 dense; 7 Infinity Fabric
    # links of 128 GB/s (both directions) to the 7 other GPUs of an MI300X platform.
    Chip("MI300X", hbm_bytes=192e9, hbm_bytes_per_s=5.3e12,
         bf16_flops_per_s=1.3074e15, int8_ops_per_s=2.6149e15,
         fp8_flops_per_s=2.6149e15, interconnect="Infinity Fabric",
         link_bytes_per_s=1.28e11 / 2, links=7, hop_latency_s=1.76e-5, pass_latency_s=1.2e-5,
         step_latency_s=0.8e-6, max_chips=8,
         source="AMD Instinct MI300X data sheet; 8 GPUs per AMD Instinct MI300X Platform; "
                "message latency 17.6 µs: RCCL's cost model (src/graph/tuning.cc, its first "
                "tuning table, ring/LL over Infinity Fabric: 12 µs + 0.8 µs a step) for a pass "
                "over 8 GPUs"),
    # Intel Gaudi 3 white paper (HL-325L OAM): 128 GB HBM2e at 3.7 TB/s; its matrix engines
    # run bf16 and fp8 alike at 1,835 TFLOPS (no int8 figure); 24 ports of 200 Gb Ethernet
    # (RoCE v2) on the chip. On the 8-card HLS-Gaudi 3 board 21 ports join each card to the
    # 7 others (3 to each) and 3 lead out to the data-centre network.
    Chip("Gaudi 3", hbm_bytes=128e9, hbm_bytes_per_s=3.7e12, bf16_flops_per_s=1.835e15,
         int8_ops_per_s=None, fp8_flops_per_s=1.835e15, interconnect="RoCE v2 (200 GbE)",
         link_bytes_per_s=gbit_per_s(200), links=21, hop_latency_s=None, max_chips=8,
         dcn_bytes_per_s=3 * gbit_per_s(200),
         source="Intel Gaudi 3 AI Accelerator white paper (HL-325L OAM; HLS-Gaudi 3 baseboard "
                "of 8 cards, 21 of each card's 24 200 GbE ports among them, 3 out); Intel "
                "publishes no message latency, so several chips need one from "
                "--hardware-config"),
)
