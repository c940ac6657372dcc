"""Questions of chapter 8, "Sharding prefill" (exercises/08_many_chips.py).

The 1D (Megatron) layout's AllReduces and why they do not shrink with more devices, the
interconnect's limit on model parallelism in prefill (α = C / W_ici and M* = F/α), and the
bytes a device passes around the ring in sequence-parallel (ring) attention. Every reference
comes from the estimator (`comm_time`, `collectives`).
"""

from __future__ import annotations

from inferbook.model.presets import get_preset

from ..questions import Exact, Mistake, Numeric

MODEL, BIG, CHIP = "llama-2-7b", "scaling-book-18b", "TPU v5e"
T_PROMPT, DEVICES, RING = 2048, 8, 4


def _allreduce_bytes_per_layer(m: int = DEVICES) -> float:
    """Bytes of the arrays the 1D layout AllReduces in one layer of a bf16 prefill."""
    from inferbook.parallel import collectives
    cfg = get_preset(MODEL)
    comms = collectives.ws1d_collectives(cfg, 1, T_PROMPT, m, bytes_per_element=2)
    return sum(c.total for c in comms if c.scope in ("attn_out", "mlp_out")) / cfg.L


def _same_for_two() -> bool:
    return _allreduce_bytes_per_layer(2) == _allreduce_bytes_per_layer(DEVICES)


def _alpha() -> float:
    from inferbook.perf import comm_time
    from inferbook.perf.hardware import get_chip
    chip = get_chip(CHIP)
    return chip.bf16_flops_per_s / comm_time.ici_bandwidth(chip)


def _prefill_limit() -> float:
    from inferbook.perf import comm_time
    from inferbook.perf.hardware import get_chip
    return comm_time.prefill_model_parallel_limit(get_preset(BIG), get_chip(CHIP))


def _ring_bytes_per_layer() -> float:
    from inferbook.parallel import collectives
    cfg = get_preset(MODEL)
    comms = collectives.ring_attention_collectives(cfg, 1, T_PROMPT, RING, 1, bytes_per_element=2)
    return sum(c.total for c in comms if c.scope == "ring") / cfg.L


QUESTIONS = [
    Numeric("ch08.allreduce_bytes_per_layer", "Bytes AllReduced per layer, 1D prefill", 1,
            "each layer ends its attention block and its MLP block with an AllReduce of the "
            "[B, T, D] activations, 2 bytes each",
            reference=_allreduce_bytes_per_layer, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, "that is one AllReduce; a layer has two, after "
                                               "attention and after the MLP"),
                      Mistake(lambda r: r / DEVICES, "the AllReduce works on the whole "
                              "[B, T, D] array, not a 1/M slice: every device holds a partial "
                              "sum of all of it")]),
    Exact("ch08.allreduce_same_on_two", "Are the AllReduces as big on 2 devices as on 8?", 1,
          "what does the array being AllReduced depend on: B, T, D — or M?",
          reference=_same_for_two, choices=(True, False)),
    Numeric("ch08.alpha", "α = C / W_ici of a TPU v5e", 1,
            "bf16 FLOP/s divided by the bandwidth of one bidirectional ring axis, which is "
            "twice the one-way bandwidth of one link (comm_time.ici_bandwidth)",
            reference=_alpha, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * r, "you used one link in one direction; a ring "
                              "axis sends both ways at once, twice that bandwidth")]),
    Numeric("ch08.prefill_parallel_limit", "Model-parallel limit of a prefill, 18B model", 2,
            "per token an MLP block does 2·(matrices)·D·F/M FLOPs per device and AllReduces "
            "D activations (2·D·2 bytes / W_ici); equate and solve for M. This model's MLP is "
            "gated: three matrices, not two",
            reference=_prefill_limit, rel_tol=0.02,
            mistakes=[Mistake(lambda r: r * 2 / 3, "that is F/α, the two-matrix MLP of the "
                              "sources; a gated MLP has three matrices and so 1.5× the "
                              "arithmetic to hide the same AllReduce behind")]),
    Numeric("ch08.ring_bytes_per_layer", "Bytes sent around the ring per layer", 1,
            "each device holds T/Q positions; per layer it passes its K block and its V block "
            "on Q − 1 times, each [B, T/Q, K, H] in bf16",
            reference=_ring_bytes_per_layer, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * RING / (RING - 1), "Q − 1 steps, not Q: after Q − 1 "
                              "passes every device has seen every block"),
                      Mistake(lambda r: r / 2, "keys and values both travel")]),
]
