"""The registry's efficiencies: what each chip achieves of its roofline, fitted, with provenance.

`inferbook estimate` prices a step under the calibrated efficiency of its chip unless told
`--ideal` (the bare roofline). The numbers below are the least-squares fit of
`inferbook calibrate` (`efficiency_fit`) to the *fit* split of the published measurements
(book/data/published/), copied here with the fit's provenance; `inferbook calibrate --check`
and tests/unit/test_efficiency_fit.py hold them to a fresh fit. The held-out points never
entered the fit; `inferbook calibrate` reports the error the fit makes on them.

Parameters are shared the way the fit shares them (`PARAMETERS`): per *chip group* — A100
(both memories), Hopper (H100 and H200, one die), TPU v5e, TPU v6e — the FLOP/s fraction of
each compute format (the two TPUs share one) and the fixed cost per layer of a prefill; per
*memory* — the NVIDIA GPUs together, each TPU alone — the weights' bandwidth fraction; per
*family* — GPUs on switched interconnects, TPUs on a torus — the fixed cost per layer of a
decode step, the cache's bandwidth fraction, the collectives' fixed cost and bandwidth
fraction, a mixture's routing cost and grouped matmuls, and weight-only dequantization.
Hopper's published decode points are all large batches of TensorRT-LLM: a bandwidth
fraction or a per-layer cost of its own would take in what those runs pay at large batch
and misprice a small one, so it shares them with the A100's small-batch points (a
cross-validation on the fit split scores both choices alike). A field that no fit point
depends on, or whose fit lands on the bare roofline's own value (the TPU v5e's bandwidth
fraction: its points need every byte of it), is not listed and keeps the bare roofline's
value. A chip without published points takes the fit of the chip it is closest to
(`CARRIED_OVER`), and says so in its source; a chip from --hardware-config takes that of
its family's best-measured chip.
"""

from __future__ import annotations

from inferbook.perf.efficiency import COMPUTE_FORMATS, Efficiency
from inferbook.perf.hardware import Chip

__all__ = ["CHIP_GROUPS", "MFU_GROUPS", "MBU_GROUPS", "PARAMETERS", "OVERLAP", "FITTED",
           "FIT_PROVENANCE", "CARRIED_OVER", "family_of", "group_of", "efficiency_for"]

CHIP_GROUPS = {"A100 80GB": "A100", "A100 40GB": "A100", "H100 SXM": "Hopper", "H200": "Hopper",
               "TPU v5e": "TPU v5e", "TPU v6e": "TPU v6e"}
MFU_GROUPS = {"TPU v5e": "TPU", "TPU v6e": "TPU"}
MBU_GROUPS = {"A100 80GB": "NVIDIA", "A100 40GB": "NVIDIA", "H100 SXM": "NVIDIA", "H200": "NVIDIA"}
# (Efficiency field, level): "chip" — one value per chip group; "mfu" — per chip group (or
# MFU_GROUPS's) and compute format; "mbu" — per MBU_GROUPS's group (or chip group);
# "family" — one per interconnect family.
PARAMETERS = (("mbu", "mbu"), ("mfu", "mfu"), ("decode_layer_s", "family"),
              ("prefill_layer_s", "chip"), ("mbu_cache", "family"),
              ("pass_overhead_s", "family"), ("link", "family"), ("moe_layer_s", "family"),
              ("experts_mfu", "family"), ("weight_only_int8", "family"),
              ("weight_only_int4", "family"))
# Whether collectives overlap with the work is how the software runs them, not fitted: NCCL's
# all-reduces run between the matmuls that need them; XLA issues collectives beside the work.
OVERLAP = {"GPU": False, "TPU": True}

# Registry chips without published points, and the fitted chip each takes its figures from.
CARRIED_OVER = {"TPU v4": "TPU v5e", "TPU v5p": "TPU v5e", "L4": "A100 80GB",
                "A10": "A100 80GB", "B200": "H200", "GB200": "H200", "MI300X": "H200",
                "Gaudi 3": "H200"}

# The fit: `inferbook calibrate` (published_calibration.calibrate), its values to four digits.
FIT_PROVENANCE = ("fitted by `inferbook calibrate` on 2026-11-28: least squares in log(predicted "
                  "/ measured time) over the points of split 'fit' of book/data/published/ "
                  "(gpt-fast, lmdeploy, TensorRT-LLM 0.5 and 0.9, jax-llm-examples, jax-llm: "
                  "A100 80GB, H100 SXM, H200, TPU v5e, TPU v6e); the 'held_out' points "
                  "never entered it")
FITTED: dict[tuple[str, str], float] = {
    ('mfu_bf16', 'A100'): 0.7438,
    ('prefill_layer_s', 'A100'): 0.0002089,
    ('decode_layer_s', 'GPU'): 4.06e-05,
    ('experts_mfu', 'GPU'): 0.2344,
    ('link', 'GPU'): 0.5134,
    ('mbu_cache', 'GPU'): 0.6636,
    ('pass_overhead_s', 'GPU'): 2.881e-06,
    ('weight_only_int4', 'GPU'): 0.7419,
    ('weight_only_int8', 'GPU'): 0.9911,
    ('mfu_fp8', 'Hopper'): 0.5231,
    ('prefill_layer_s', 'Hopper'): 0.0001229,
    ('mbu', 'NVIDIA'): 0.6998,
    ('mbu_cache', 'TPU'): 0.7191,
    ('mfu_bf16', 'TPU'): 0.3405,
    ('moe_layer_s', 'TPU'): 0.0002152,
    ('mbu', 'TPU v6e'): 0.5758,
}


def family_of(chip: Chip) -> str:
    """'TPU' for a chip on a torus (ICI), 'GPU' for every switched interconnect."""
    return "TPU" if chip.interconnect == "ICI" else "GPU"


def group_of(chip_name: str, level: str) -> str:
    """The group a registry chip shares a parameter of `level` with."""
    if level == "mfu":
        return MFU_GROUPS.get(chip_name, CHIP_GROUPS.get(chip_name, chip_name))
    if level == "mbu":
        return MBU_GROUPS.get(chip_name, CHIP_GROUPS.get(chip_name, chip_name))
    return CHIP_GROUPS.get(chip_name, chip_name)


def efficiency_for(chip: Chip) -> Efficiency:
    """The calibrated efficiency of `chip`: its group's and family's fitted figures (a chip
    without points: those of `CARRIED_OVER[chip]`, or of its family's best-measured chip),
    the bare roofline's where the fit determined none; a compute format the group's points
    did not run takes the mean of the formats they did."""
    family = family_of(chip)
    fitted_as = (chip.name if chip.name in CHIP_GROUPS
                 else CARRIED_OVER.get(chip.name, "TPU v5e" if family == "TPU" else "H200"))
    fields: dict[str, float] = {}
    for field, level in PARAMETERS:
        group = family if level == "family" else group_of(fitted_as, level)
        if level == "mfu":
            found = {c: FITTED[(f"mfu_{c}", group)] for c in COMPUTE_FORMATS
                     if (f"mfu_{c}", group) in FITTED}
            for c in COMPUTE_FORMATS:
                if found:
                    fields[f"mfu_{c}"] = found.get(c, sum(found.values()) / len(found))
        elif (field, group) in FITTED:
            fields[field] = FITTED[(field, group)]
    said = ("" if fitted_as == chip.name else
            f"; {chip.name} has no published point: the figures of {fitted_as}")
    return Efficiency(**fields, decode_overlap=OVERLAP[family], prefill_overlap=OVERLAP[family],
                      name=f"calibrated ({fitted_as})" if said else "calibrated",
                      source=FIT_PROVENANCE + said)
