"""The two steps an estimate prices — a decode step and a prefill — as `StepCost`s, per layout.

`inferbook estimate` (`estimator.estimate`) describes a deployment by what its steps compute
and read, and hands each to the library's one step-time formula. This module builds them:

    decode    attention  decode attention FLOPs,   the cache the step reads
              weights    2·B·(matmul weights),     the weights the batch touches
    prefill   one pass   the forward pass's FLOPs, the weights its B·T tokens touch + the cache
                                                   it writes

*The routed rows* of a mixture of experts are its (token, expert) pairs, k per token, each a
row of D activations. A grouped-matmul MoE (`model.moe.moe_sparse`) moves each pair's row
through memory four times a routing layer (`ROUTED_ROW_PASSES`): it writes the rows sorted
by expert (dispatch), the experts' first matmuls read them, their last matmul writes each
pair's output row, and the weighted sum over the k reads those back (combine). How many
chips repeat that traffic is the layout's doing (`routed_row_bytes`): a chip that holds a
slice of F_e of every expert (the 1D layout) works on every pair's row, so n chips move n
copies of them, and a decode step's dispatch grows with B·k on every chip, not B·k / n.

*The weights a pass touches* are every layer matrix, less the routed experts no token was
routed to (`weight_bytes_read`), and of a lookup table (the input embedding, learned
positions) only the rows its tokens look up, at most the table: a decode step of B sequences
reads B rows of the embedding, not all V (with tied embeddings the table is read whole
anyway, as the unembedding). The lookup does no arithmetic, so the matmul FLOPs are
2 per matmul weight per token (`counts.matmul_params`).

Layouts: on one chip, or in the 1D / 2D weight-stationary layouts, the chips share every
part evenly, so the parts are totals divided over n chips (`ChipShare.chips` = n). The
expert-parallel layout (`parallel.expert_parallel`) is uneven: each of Z·Y chips holds E/Z
whole experts split Y ways, and a copy of everything else split over Y, for B/Z of the
sequences; its parts are one chip's (`ChipShare.chips` = 1). Routing is balanced: every
chip reads its share of the experts the batch touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, params
from inferbook.perf.decode_attention_cost import decode_attention_flops
from inferbook.perf.layout_comms import LayoutComms
from inferbook.perf.step_cost import StepCost, Work

__all__ = ["ModelBytes", "ChipShare", "weight_bytes_read", "lookup_bytes_read", "model_bytes_read",
           "estimate_decode_cost", "prefill_cost", "matmul_flops_by_block", "routed_row_bytes",
           "ROUTED_ROWS", "ROUTED_ROW_PASSES"]

ROUTED_ROWS = "routed rows"     # the part of a step that dispatches and combines them
ROUTED_ROW_PASSES = 4           # dispatch write, experts' read, experts' write, combine read
ACTIVATION_BYTES = 2.0          # the rows are bfloat16 activations


def weight_bytes_read(cfg: ModelConfig, total_bytes: float, expert_bytes: float,
                      tokens: float) -> float:
    """Weight bytes a pass over `tokens` tokens reads: all of them, except that each MoE layer
    reads only the experts its tokens touch, `expected_experts` of E."""
    if cfg.moe is None:
        return total_bytes
    touched = params.expected_experts(cfg.moe.E, cfg.moe.k, tokens) / cfg.moe.E
    return total_bytes - expert_bytes + expert_bytes * touched


@dataclass(frozen=True)
class ModelBytes:
    """The weights as the steps read them: all bytes, the routed experts' bytes, each lookup
    table's (rows, bytes per row), and the storage format the matmuls dequantize from (None
    when they multiply the stored numbers as they are)."""

    total: float
    experts: float
    lookups: tuple[tuple[int, float], ...]
    dequantized: str | None = None

    @classmethod
    def of(cls, cfg: ModelConfig, total: float, experts: float, bytes_per_lookup: float,
           dequantized: str | None = None) -> "ModelBytes":
        """Lookup tables are the `embedding`-role tensors (`params.tensors`), stored at
        `bytes_per_lookup` per number; a tied embedding is the unembedding too, read whole."""
        tables = tuple((t.shape[0], t.shape[1] * bytes_per_lookup) for t in params.tensors(cfg)
                       if t.role == "embedding" and not (cfg.tied_embeddings and t.name == "embed"))
        return cls(total, experts, tables, dequantized)


def lookup_bytes_read(mb: ModelBytes, tokens: float) -> float:
    """Bytes of the lookup tables a pass over `tokens` tokens reads: a row per token, at most
    every row (the tokens' distinct rows can be fewer; this is the bound)."""
    return sum(min(tokens, rows) * row for rows, row in mb.lookups)


def model_bytes_read(cfg: ModelConfig, mb: ModelBytes, tokens: float) -> float:
    """Weight bytes a pass over `tokens` tokens reads of one copy of the model: every matrix
    but the experts no token was routed to, and a row per token of each lookup table."""
    whole_tables = sum(rows * row for rows, row in mb.lookups)
    return (weight_bytes_read(cfg, mb.total, mb.experts, tokens) - whole_tables
            + lookup_bytes_read(mb, tokens))


def matmul_flops_by_block(cfg: ModelConfig, tokens: float) -> dict[str, float]:
    """Matmul FLOPs of `tokens` tokens by block: 'attention' (the projections), 'mlp' (dense
    MLPs, the k routed experts, shared experts and routers), 'logits' (the unembedding).
    Their sum is 2 · tokens · `counts.matmul_params`."""
    out = {"attention": 0.0, "mlp": 0.0, "logits": 2.0 * tokens * cfg.D * cfg.V}
    for t in params.tensors(cfg):
        if t.role in ("matrix", "router", "expert"):
            size = t.size * cfg.moe.k / cfg.moe.E if t.role == "expert" else t.size
            out["attention" if t.component == "attention" else "mlp"] += 2.0 * tokens * size
    return out


@dataclass(frozen=True)
class ChipShare:
    """How a layout shares a step: `chips` to divide the parts over (n when they share it
    evenly, 1 when the parts are one chip's), the copies of the weights other than the
    experts (`weight_copies`: Z for expert parallelism, each of whose Z groups holds all
    of them) and of the cache (latent attention's, kept whole by each tensor-parallel chip),
    and the layout's split (`layout_comms.layout_candidates`)."""

    comms: LayoutComms
    chips: int
    weight_copies: int = 1
    cache_copies: int = 1
    experts_over: int = 1            # Z: chips the routed experts are split over whole
    split: int = 1                   # the layout's split: X of 2d-ws, Y of expert-parallel


def routed_row_bytes(cfg: ModelConfig, share: ChipShare, tokens: float) -> float:
    """Bytes of routed rows one chip moves in a pass over `tokens` tokens (see the module's
    docstring): ROUTED_ROW_PASSES · tokens · k · D · 2 bytes per routing layer, for the pairs
    the chip works on: every one in the 1D layout (its slice of F_e of every expert needs
    every routed row), those routed to its group of E / Z experts, 1 / Z of them, in the
    expert-parallel layout (the 2D layout serves dense models only). 0 for a dense model."""
    if cfg.moe is None:
        return 0.0
    pairs = tokens * cfg.moe.k / share.experts_over
    return ROUTED_ROW_PASSES * pairs * cfg.D * ACTIVATION_BYTES * _moe_layers(cfg)


def _weight_parts(share: ChipShare, cfg: ModelConfig, mb: ModelBytes, tokens: float,
                  flops: float, extra_bytes: float, name: str) -> list[Work]:
    """The weights a pass over `tokens` tokens reads and multiplies as parts: `name` (every
    matrix but the routed experts, with `flops` FLOPs of matmuls and whatever else the pass
    computes, and `extra_bytes`) and, for a mixture of experts, 'experts' (their grouped
    matmuls over the experts the tokens touch) and ROUTED_ROWS (moving the tokens' routed
    rows to them and back, `routed_row_bytes`), each paying its own roofline. One chip's
    share of them in the expert-parallel layout (the rest split over Y, the experts over
    all n), all of them for an even layout."""
    experts_read = 0.0 if cfg.moe is None else weight_bytes_read(cfg, mb.experts, mb.experts,
                                                                 tokens)
    expert_flops = 0.0 if cfg.moe is None else 2.0 * tokens * sum(
        t.size for t in params.tensors(cfg) if t.role == "expert") * cfg.moe.k / cfg.moe.E
    dense_read = model_bytes_read(cfg, mb, tokens) - experts_read
    dense_flops = flops - expert_flops
    n = share.comms.chips
    if share.chips == 1 and n > 1:                      # one chip's share of an uneven layout
        dense_read, experts_read = dense_read / (n // share.experts_over), experts_read / n
        dense_flops, expert_flops, extra_bytes = dense_flops / n, expert_flops / n, \
            extra_bytes / n
    parts = [Work(name, dense_flops, dense_read + extra_bytes, mb.dequantized)]
    if cfg.moe is not None:
        rows = routed_row_bytes(cfg, share, tokens) * (share.chips if share.chips > 1 else 1)
        parts.append(Work("experts", expert_flops, experts_read, mb.dequantized, grouped=True))
        parts.append(Work(ROUTED_ROWS, 0.0, rows))
    return parts


def estimate_decode_cost(cfg: ModelConfig, mb: ModelBytes, share: ChipShare, batch: int,
                     context: int, kv_element_bytes: float) -> StepCost:
    """One decode step of `batch` sequences holding `context` tokens each: attention, then
    the weights the batch touches (the routed experts apart), then the layout's
    collectives."""
    kv = share.cache_copies * counts.kv_cache_bytes(cfg, batch, context, kv_element_bytes)
    attention = decode_attention_flops(cfg, batch, context)
    if share.chips == 1 and share.comms.chips > 1:      # one chip's share of an uneven layout
        kv, attention = kv / share.comms.chips, attention / share.comms.chips
    weights = _weight_parts(share, cfg, mb, batch, 2.0 * batch * counts.matmul_params(cfg),
                            0.0, "weights")
    c = share.comms
    return StepCost((Work("attention", attention, kv, cache=True), *weights), c.bandwidth_s,
                    c.latency_s, c.passes, cfg.L, "decode", moe_layers=_moe_layers(cfg))


def prefill_cost(cfg: ModelConfig, mb: ModelBytes, share: ChipShare, batch: int, prompt: int,
                 kv_element_bytes: float, overlap: bool | None = None) -> StepCost:
    """The prefill of `batch` prompts of `prompt` tokens: one forward pass (attention's full
    T × T rectangle, as the library's FLOP counter counts it; logits for the last token), the
    weights its tokens touch and the cache it writes (the routed experts a part apart),
    joined to `share.comms` (priced for this pass) overlapped or not (None: as the
    efficiency that prices it says)."""
    flops = counts.forward_flops(cfg, batch, prompt, prompt, logits_for=1)
    written = share.cache_copies * counts.kv_cache_bytes(cfg, batch, prompt, kv_element_bytes)
    parts = _weight_parts(share, cfg, mb, batch * prompt, flops, written, "forward pass")
    c = share.comms
    return StepCost(tuple(parts), c.bandwidth_s, c.latency_s, c.passes, cfg.L, "prefill",
                    overlap, _moe_layers(cfg))


def _moe_layers(cfg: ModelConfig) -> int:
    return 0 if cfg.moe is None else cfg.L - len(set(cfg.moe.dense_layers))
