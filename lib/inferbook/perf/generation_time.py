"""A whole generation — a prefill, then one decode step per further token — and its price.

A request of a T-token prompt that generates N tokens runs the prefill (its logits give the
first token) and then N − 1 decode steps, the i-th with T + i tokens in its cache:

    generation = prefill(T) + Σ_{i=1}^{N−1} step(T + i)

A step's time is piecewise linear in its context (the cache read grows linearly; the roofline's
max and the layers' windows put kinks in it), so the sum is taken over at most
`MAX_STEP_SAMPLES` runs of consecutive steps, each priced at its middle step: exact where a
run holds no kink, and close where it does. `inferbook estimate --output N` reports it, and
`published_baseline` predicts the published generation rates with it.

At a price per chip-hour, a token costs the chips' time it takes: a decode step makes B
tokens in `step` seconds on n chips, a prefill B·T prompt tokens.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["MAX_STEP_SAMPLES", "step_groups", "generation_seconds", "costs_per_million"]

MAX_STEP_SAMPLES = 64


def step_groups(steps: int) -> list[tuple[int, int]]:
    """(count, middle step) of at most MAX_STEP_SAMPLES runs of consecutive steps 1..steps."""
    groups = min(steps, MAX_STEP_SAMPLES)
    if groups < 1:
        return []
    edges = [1 + steps * g // groups for g in range(groups + 1)]
    return [(hi - lo, (lo + hi - 1) // 2) for lo, hi in zip(edges, edges[1:])]


def generation_seconds(step_s: Callable[[int], float], prefill_s: float, prompt: int,
                       output: int) -> float:
    """prefill + Σ_{i=1}^{output−1} step(prompt + i): the time from a request's arrival (its
    prompt prefilled at once) to its last of `output` tokens; `step_s(context)` is a decode
    step's time with `context` tokens cached."""
    return prefill_s + sum(count * step_s(prompt + middle)
                           for count, middle in step_groups(output - 1))


def costs_per_million(price_per_chip_hour: float | None, chips: int, batch: int,
                      step_s: float, prefill_s: float, prompt: int,
                      generation_s: float | None, output: int | None) -> dict[str, float | None]:
    """Dollars per million tokens at `price_per_chip_hour` on `chips` chips: generated in
    steady decoding (B tokens a step), prompt tokens prefilled (B·T a prefill), and, given
    an output length, output tokens over the whole generation, prefill included. None
    without a price."""
    keys = ("usd_per_million_tokens", "usd_per_million_prompt_tokens",
            "usd_per_million_output_tokens")
    if price_per_chip_hour is None:
        return dict.fromkeys(keys)
    per_s = price_per_chip_hour * chips / 3600          # dollars per second of the chips
    whole = None if generation_s is None else per_s * generation_s / (batch * output) * 1e6
    return dict(zip(keys, (per_s * step_s / batch * 1e6,
                           per_s * prefill_s / (batch * prompt) * 1e6, whole)))
