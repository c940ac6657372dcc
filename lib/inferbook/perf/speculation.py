"""Speculative decoding in numbers: how many tokens a step yields, and when that is faster.

A draft proposes γ tokens; the target model checks all of them in one forward pass and keeps
the longest acceptable run, plus one token of its own. Leviathan, Kalman and Matias (2023,
"Fast Inference from Transformers via Speculative Decoding", section 3) model each proposed
token as accepted independently with probability α, the *acceptance rate*. For exact
sampling, α is the expected overlap of the two distributions, E[Σ_x min(p(x), q(x))] — one
minus their total-variation distance; for greedy decoding it is the chance that the draft's
argmax equals the target's.

The formulas below are theirs: eq. (1) for the expected tokens per step and theorem 3.8 for
the wall-time improvement, where c is the cost of one draft step relative to one target step.
We add one knob their analysis fixes at 1: `verify_cost`, the cost of the target's forward
pass over γ + 1 tokens relative to a one-token decode step. On an accelerator whose decode is
memory-bound it is close to 1 (the weights are read once either way); on a CPU, where a
few-row matrix multiplication runs far below the machine's peak, it is not, and the measured
speedup shows it.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["expected_tokens_per_step", "speculative_speedup", "optimal_gamma",
           "acceptance_rate"]


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens per target step] = (1 − α^(γ+1)) / (1 − α)  (Leviathan et al., eq. 1).

    Between 1 (α = 0: every draft rejected, the target still contributes its own token) and
    γ + 1 (α = 1: all accepted, plus the bonus token).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")
    if alpha == 1:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def speculative_speedup(alpha: float, gamma: int, cost_ratio: float,
                        verify_cost: float = 1.0) -> float:
    """Expected wall-time speedup over plain decoding (Leviathan et al., theorem 3.8).

    One speculative step costs γ draft steps (c each, in units of a target decode step) plus
    one verification (`verify_cost`, 1 in the paper) and yields expected_tokens_per_step
    tokens; plain decoding yields one token per unit of time:

        speedup = (1 − α^(γ+1)) / ((1 − α) · (γ·c + verify_cost))
    """
    return expected_tokens_per_step(alpha, gamma) / (gamma * cost_ratio + verify_cost)


def optimal_gamma(alpha: float, cost_ratio: float, verify_cost: float = 1.0,
                  max_gamma: int = 32) -> int:
    """The number of draft tokens γ in 0..max_gamma that maximises `speculative_speedup`."""
    return max(range(max_gamma + 1),
               key=lambda g: speculative_speedup(alpha, g, cost_ratio, verify_cost))


def acceptance_rate(p: Sequence[float], q: Sequence[float]) -> float:
    """Σ_x min(p(x), q(x)): the chance the rejection rule accepts a draft token drawn from q
    when the target's distribution is p (Leviathan et al., definition 3.1 and corollary 3.6)."""
    if len(p) != len(q):
        raise ValueError("p and q must have the same length")
    return float(sum(min(a, b) for a, b in zip(p, q)))
