"""FlashAttention and Flash-Decoding as Pallas kernels.

`inferbook.kernels.flash` and `inferbook.kernels.flash_decoding` express the algorithms in jnp
and leave the schedule to XLA. A Pallas kernel states the schedule itself: a *grid* of
programs, each of which loads its own tiles (BlockSpecs say which) and loops over the rest,
the way a CUDA thread block would. Two grids tell the whole story of the two papers:

  * `pallas_flash_attention`: one program per (batch row, query head, query tile) — the
    FlashAttention-2 grid, which added the query-tile axis to FlashAttention-1's (batch,
    head). Each program walks the KV tiles its queries can see with the online softmax.
  * `pallas_flash_decoding`: one program per (batch row, KV head, cache chunk) — the
    Flash-Decoding grid. A decode step has a single query tile, so without the chunk axis
    only B·K programs exist; with it, B·K·P. Each program handles the G query heads that
    share its KV head together, so every key is read once, and writes a partial output and
    log-sum-exp; `flash_decoding.combine_chunks` merges them.

Where they run: on a CPU backend the kernels run in Pallas' interpreter (`interpret=True`),
which executes the same program semantics with ordinary XLA operations — slow, but exact, so
the tests check the kernels here against `attention.reference_at_positions`. On a GPU they are
compiled (Triton); shapes are padded to what Triton needs (power-of-two tiles of at least
16). The kernels use only the Pallas API common to jax 0.7.2 and 0.10.2 (pallas_call,
BlockSpec with None for squeezed dimensions, program_id, pl.ds). TPU compilation is
attempted when a TPU is the backend but has not been tested; pass interpret=True there if
Mosaic rejects a shape.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from inferbook.kernels.flash import (
    kv_tile_range,
    online_softmax_init,
    online_softmax_result,
    online_softmax_step,
)
from inferbook.kernels.flash_decoding import combine_chunks, rows_to_heads
from inferbook.model.attention import MASKED, group_queries

__all__ = ["pallas_flash_attention", "pallas_flash_decoding", "default_interpret"]


def default_interpret() -> bool:
    """Interpret on CPU (no Pallas compiler there); compile on GPU and TPU."""
    return jax.default_backend() == "cpu"


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, 1 << (max(n, 1) - 1).bit_length())


def _pad(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


def _attend_tiles(q_RH, k_ref, v_ref, pos_R, kv_len, base, lo, hi, block_k, scale, window):
    """The loop every program runs: KV tiles lo..hi-1 of its block of keys, online softmax."""
    R, H = q_RH.shape

    def visit(j, carry):
        start = pl.multiple_of(j * block_k, block_k)
        k_CH = k_ref[pl.ds(start, block_k), :]
        v_CH = v_ref[pl.ds(start, block_k), :]
        s_RC = lax.dot_general(q_RH, k_CH, (((1,), (1,)), ((), ())),
                               preferred_element_type=jnp.float32) * scale
        k_pos = base + start + lax.broadcasted_iota(jnp.int32, (block_k,), 0)
        # attention.attention_mask's rule, written in two dimensions (Triton has no 3-D slices).
        q_R1, k_1C = pos_R[:, None], k_pos[None, :]
        mask = (k_1C <= q_R1) & (k_1C < kv_len)
        if window is not None:
            mask &= q_R1 - k_1C < window
        return online_softmax_step(carry, jnp.where(mask, s_RC, MASKED), v_CH, "RC,CH->RH")

    o, m, l = lax.fori_loop(lo, hi, visit, online_softmax_init((R,), H))
    return online_softmax_result(o, m, l, empty=-jnp.inf)


def _flash_kernel(q_ref, k_ref, v_ref, pos_ref, len_ref, o_ref, lse_ref, *, block_k,
                  num_tiles, scale, window):
    pos, kv_len = pos_ref[...], len_ref[0]
    lo, hi = kv_tile_range(pos, kv_len, block_k, num_tiles, window)
    out, lse = _attend_tiles(q_ref[...], k_ref, v_ref, pos, kv_len, 0, lo, hi, block_k,
                             scale, window)
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = lse


@functools.partial(jax.jit, static_argnames=("window", "block_q", "block_k", "interpret"))
def pallas_flash_attention(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                           q_pos_BT: jax.Array, kv_len_B: jax.Array, window: int | None = None,
                           block_q: int = 64, block_k: int = 64,
                           interpret: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """FlashAttention(-2) forward as a Pallas kernel: output [B, T, N, H], lse [B, T, N].

    Grid (B, N, ceil(T / block_q)); program (b, n, i) owns query tile i of head n and reads
    KV head n // G. Block sizes must be powers of two (at least 16 to compile on a GPU).
    """
    interpret = default_interpret() if interpret is None else interpret
    B, T, N, H = q_BTNH.shape
    K, S = k_BKSH.shape[1], k_BKSH.shape[2]
    G, Hp = N // K, _pow2_at_least(H)
    Tp, Sp = -(-T // block_q) * block_q, -(-S // block_k) * block_k
    q = _pad(_pad(q_BTNH, 3, Hp), 1, Tp).transpose(0, 2, 1, 3)          # [B, N, Tp, Hp]
    k, v = (_pad(_pad(x, 3, Hp), 2, Sp) for x in (k_BKSH, v_BKSH))
    pos = _pad(q_pos_BT.astype(jnp.int32), 1, Tp, value=-1)             # padding sees nothing
    kernel = functools.partial(_flash_kernel, block_k=block_k, num_tiles=Sp // block_k,
                               scale=1.0 / H ** 0.5, window=window)
    out, lse = pl.pallas_call(
        kernel, grid=(B, N, Tp // block_q),
        in_specs=[pl.BlockSpec((None, None, block_q, Hp), lambda b, n, i: (b, n, i, 0)),
                  pl.BlockSpec((None, None, Sp, Hp), lambda b, n, i: (b, n // G, 0, 0)),
                  pl.BlockSpec((None, None, Sp, Hp), lambda b, n, i: (b, n // G, 0, 0)),
                  pl.BlockSpec((None, block_q), lambda b, n, i: (b, i)),
                  pl.BlockSpec((None, 1), lambda b, n, i: (b, 0))],
        out_specs=[pl.BlockSpec((None, None, block_q, Hp), lambda b, n, i: (b, n, i, 0)),
                   pl.BlockSpec((None, None, block_q), lambda b, n, i: (b, n, i))],
        out_shape=[jax.ShapeDtypeStruct((B, N, Tp, Hp), q_BTNH.dtype),
                   jax.ShapeDtypeStruct((B, N, Tp), jnp.float32)],
        interpret=interpret,
    )(q, k, v, pos, kv_len_B.astype(jnp.int32)[:, None])
    lse = jnp.where(jnp.isfinite(lse), lse, MASKED)
    return out[:, :, :T, :H].transpose(0, 2, 1, 3), lse[:, :, :T].transpose(0, 2, 1)


def _decode_kernel(q_ref, k_ref, v_ref, pos_ref, len_ref, o_ref, lse_ref, *, chunk, block_k,
                   scale, window):
    base = pl.program_id(2) * chunk                    # this program's first cache slot
    pos, kv_len = pos_ref[...], len_ref[0]
    lo, hi = kv_tile_range(pos - base, kv_len - base, block_k, chunk // block_k, window)
    out, lse = _attend_tiles(q_ref[...], k_ref, v_ref, pos, kv_len, base, lo, hi, block_k,
                             scale, window)
    o_ref[...] = out
    lse_ref[...] = lse


@functools.partial(jax.jit, static_argnames=("num_splits", "window", "block_k", "interpret"))
def pallas_flash_decoding(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                          q_pos_BT: jax.Array, kv_len_B: jax.Array, num_splits: int = 16,
                          window: int | None = None, block_k: int = 64,
                          interpret: bool | None = None) -> tuple[jax.Array, jax.Array]:
    """Flash-Decoding as a Pallas kernel plus the lse combine: output [B, T, N, H], lse.

    Grid (B, K, P); program (b, k, p) attends the G·T query rows of KV head k to cache chunk
    p (S / P slots, read once) and writes that chunk's partial output and log-sum-exp.
    num_splits=1 is the unsplit kernel: one program per (batch row, KV head), as
    FlashAttention schedules a decode step. S is padded to a multiple of P·block_k.
    """
    interpret = default_interpret() if interpret is None else interpret
    B, T, N, H = q_BTNH.shape
    K, S = k_BKSH.shape[1], k_BKSH.shape[2]
    G, P, Hp = N // K, num_splits, _pow2_at_least(H)
    M, Mp = G * T, _pow2_at_least(G * T)
    Sp = -(-S // (P * block_k)) * (P * block_k)
    q = group_queries(q_BTNH, K)
    q = _pad(_pad(q, 3, Hp), 2, Mp)                                      # [B, K, Mp, Hp]
    k, v = (_pad(_pad(x, 3, Hp), 2, Sp) for x in (k_BKSH, v_BKSH))
    pos = _pad(jnp.tile(q_pos_BT.astype(jnp.int32), (1, G)), 1, Mp, value=-1)   # row g·T + t
    kernel = functools.partial(_decode_kernel, chunk=Sp // P, block_k=block_k,
                               scale=1.0 / H ** 0.5, window=window)
    o_part, lse_part = pl.pallas_call(
        kernel, grid=(B, K, P),
        in_specs=[pl.BlockSpec((None, None, Mp, Hp), lambda b, h, p: (b, h, 0, 0)),
                  pl.BlockSpec((None, None, Sp // P, Hp), lambda b, h, p: (b, h, p, 0)),
                  pl.BlockSpec((None, None, Sp // P, Hp), lambda b, h, p: (b, h, p, 0)),
                  pl.BlockSpec((None, Mp), lambda b, h, p: (b, 0)),
                  pl.BlockSpec((None, 1), lambda b, h, p: (b, 0))],
        out_specs=[pl.BlockSpec((None, None, None, Mp, Hp), lambda b, h, p: (b, h, p, 0, 0)),
                   pl.BlockSpec((None, None, None, Mp), lambda b, h, p: (b, h, p, 0))],
        out_shape=[jax.ShapeDtypeStruct((B, K, P, Mp, Hp), jnp.float32),
                   jax.ShapeDtypeStruct((B, K, P, Mp), jnp.float32)],
        interpret=interpret,
    )(q, k, v, pos, kv_len_B.astype(jnp.int32)[:, None])
    out, lse = combine_chunks(o_part[:, :, :, :M, :H], lse_part[:, :, :, :M])
    return rows_to_heads(out, lse, T, q_BTNH.dtype)
