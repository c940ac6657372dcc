"""Questions of chapter 11, "Designing an inference engine" (exercises/11_serving.py).

How many generate steps static batching and interleaved (continuous) batching run for the
same requests — replayed through the library's own orchestrator on its mock engine — and the
estimator's costs of disaggregated serving: one decode step, one prefill, and shipping the
prefill's KV cache to the generate server.
"""

from __future__ import annotations

from ..questions import Exact, Mistake, Numeric

# Eight requests, all waiting at time 0, with these output lengths; four decode slots.
OUTPUT_LENGTHS = (3, 12, 5, 7, 20, 2, 9, 4)
SLOTS = 4
MODEL, CHIP, PROMPT = "llama-2-7b", "TPU v5e", 4096
DECODE_BATCH, DECODE_CONTEXT = 32, 2048


def _generate_steps(design: str) -> int:
    """Replay the requests through the orchestrator and count its generate calls."""
    from inferbook.serving import CostTimer, LinearCost, MockEngine, Request, serve
    trace = [Request(i, (1, 2, 3, 4 + i), n) for i, n in enumerate(OUTPUT_LENGTHS)]
    run = serve(MockEngine(slots=SLOTS, max_len=64), None, trace, design,
                timer=CostTimer(LinearCost()))
    return sum(e.kind == "generate" for e in run.events)


def _cfg():
    from inferbook.model.presets import get_preset
    return get_preset(MODEL)


def _chip():
    from inferbook.perf.hardware import get_chip
    return get_chip(CHIP)


def _transfer() -> float:
    from inferbook.perf import phase_time
    return phase_time.kv_transfer_seconds(_cfg(), PROMPT, _chip().link_bytes_per_s)


def _prefill() -> float:
    from inferbook.perf import phase_time
    return phase_time.prefill_seconds(_cfg(), _chip(), PROMPT)


def _decode_step() -> float:
    from inferbook.perf import phase_time
    return phase_time.generate_step_seconds(_cfg(), _chip(), DECODE_BATCH,
                                          DECODE_BATCH * DECODE_CONTEXT)


_FIRST_TOKEN = ("the prefill already produces each request's first token, so a request of n "
                "tokens needs n − 1 generate steps")

QUESTIONS = [
    Exact("ch11.static_steps", "Generate steps under static batching", 1,
          "batches of 4 in arrival order; a batch runs until its longest request is done, and "
          + _FIRST_TOKEN, reference=lambda: _generate_steps("static")),
    Exact("ch11.interleaved_steps", "Generate steps when slots are refilled at once", 2,
          "simulate it: before every generate step, each free slot takes the next waiting "
          "request (its prefill gives its first token); every step gives each running request "
          "one token; a request leaves its slot when it has all its tokens. "
          + _FIRST_TOKEN, reference=lambda: _generate_steps("interleaved")),
    Numeric("ch11.decode_step_seconds", "One decode step of Llama-2-7B on a TPU v5e", 1,
            "the KV cache of the whole batch is read at HBM speed, plus the larger of the "
            "weights' read time and the matmuls' time (bf16 weights and cache)",
            reference=_decode_step, rel_tol=0.02,
            mistakes=[Mistake(lambda r: r - DECODE_BATCH * DECODE_CONTEXT
                              * 2 * _cfg().L * _cfg().K * _cfg().H * 2 / _chip().hbm_bytes_per_s,
                              "you left out reading the KV cache, which at this batch and "
                              "context costs about as much as the weights")]),
    Numeric("ch11.prefill_seconds", "Prefill of a 4,096-token prompt on a TPU v5e", 1,
            "the larger of FLOPs / peak and bytes / bandwidth (counts.forward_flops counts "
            "the FLOPs with the logits of one position); long prompts are compute-bound",
            reference=_prefill, rel_tol=0.02),
    Numeric("ch11.kv_transfer_seconds", "Shipping that prompt's KV cache over one ICI link", 1,
            "tokens × 2·L·K·H·2 bytes, over one link's one-way bandwidth (link_bytes_per_s)",
            reference=_transfer, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / 2, "keys and values both make the trip")]),
]
