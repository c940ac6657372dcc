"""Blockwise FlashAttention, Flash-Decoding and FlashDecoding++ against the reference.

Each variant must give the reference's output *and* log-sum-exp for random shapes, dtypes,
head ratios, ragged lengths and windows. Beyond equality: the blockwise kernel must never
hold an S×S matrix (checked in the compiled program), its causal tile skipping must never
skip a visible key (checked by brute force), and the unified-max path must need its overflow
check (without it a bad φ gives wrong answers; with it, the answers are exact).
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from attention_cases import assert_matches_reference, cases
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.kernels.flash import flash_attention, kv_tile_range
from inferbook.kernels.flash_decoding import combine_chunks, flash_decoding, unified_max_attention
from inferbook.model.attention import (
    MASKED,
    attention_mask,
    attention_reference,
    merge_partials,
    reference_at_positions,
)
from inferbook.perf.compiled import program_memory

flash = jax.jit(flash_attention, static_argnames=("window", "block_q", "block_k"))
decoding = jax.jit(flash_decoding, static_argnames=("num_splits", "window"))
unified = jax.jit(unified_max_attention, static_argnames=("num_splits", "window", "bounds"))
tile_range = jax.jit(kv_tile_range, static_argnums=(2, 3, 4))


@settings(max_examples=8)
@given(case=cases(), block_q=st.sampled_from([1, 4, 8, 16]), block_k=st.sampled_from([4, 8, 16]))
def test_blockwise_attention_matches_the_reference(case, block_q, block_k):
    out, lse = flash(*case.arrays, window=case.window, block_q=block_q, block_k=block_k)
    assert_matches_reference(case, out, lse)


@settings(max_examples=8)
@given(case=cases(max_T=4), num_splits=st.sampled_from([1, 2, 4, 8]))
def test_flash_decoding_matches_the_reference(case, num_splits):
    out, lse = decoding(*case.arrays, num_splits=num_splits, window=case.window)
    assert_matches_reference(case, out, lse)


@settings(max_examples=8)
@given(case=cases(max_T=4, dtypes=("float32",)), phi=st.sampled_from([0.0, 2.0, 10.0]))
def test_unified_max_is_exact_when_phi_is_in_range(case, phi):
    out, lse, recomputed = unified(*case.arrays, phi, num_splits=4, window=case.window)
    assert_matches_reference(case, out, lse)
    assert not recomputed


@settings(max_examples=5)
@given(case=cases(max_T=4, dtypes=("float32",)), phi=st.sampled_from([-200.0, 200.0]))
def test_unified_max_recomputes_when_phi_is_out_of_range(case, phi):
    out, lse, recomputed = unified(*case.arrays, phi, num_splits=4, window=case.window)
    assert recomputed
    assert_matches_reference(case, out, lse)
    # Without the check the same φ is wrong: exp(s - φ) overflows (φ far below the scores)
    # or every weight underflows to zero (φ far above them).
    out, lse, recomputed = unified(*case.arrays, phi, num_splits=4, window=case.window,
                                      bounds=(-np.inf, np.inf))
    assert not recomputed
    with pytest.raises(AssertionError):
        assert_matches_reference(case, out, lse)


@partial(jax.jit, static_argnames=("num_splits", "window"))
def chunks_merged_both_ways(q, k, v, q_pos, kv_len, num_splits, window):
    """Each chunk's attention by the reference (that chunk's keys only), merged two at a time
    with attention.merge_partials and all at once with combine_chunks."""
    C = k.shape[2] // num_splits
    outs, lses = [], []
    for p in range(num_splits):
        keys = slice(p * C, (p + 1) * C)
        mask = attention_mask(q_pos, jnp.arange(p * C, (p + 1) * C), kv_len, window)
        o, l = attention_reference(q, k[:, :, keys], v[:, :, keys], mask)
        outs.append(o)
        lses.append(l)        # MASKED (weight 0 in both merges) where a row sees no key
    out, lse = outs[0], lses[0]
    for o, l in zip(outs[1:], lses[1:]):
        out, lse = merge_partials(out, lse, o, l)
    # combine_chunks merges along axis 2; here the other axes are [B, T, P, N(, H)].
    return (out, lse), combine_chunks(jnp.stack(outs, axis=2), jnp.stack(lses, axis=2))


@settings(max_examples=8)
@given(case=cases(max_T=3, dtypes=("float32",)), num_splits=st.sampled_from([2, 4]))
def test_combining_chunks_equals_merging_them_pairwise(case, num_splits):
    (out, lse), (comb_out, comb_lse) = chunks_merged_both_ways(
        *case.arrays, num_splits=num_splits, window=case.window)
    ok = np.asarray(lse) > MASKED / 2          # rows that see some key
    np.testing.assert_allclose(np.asarray(comb_lse)[ok], np.asarray(lse)[ok], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(np.asarray(comb_out)[ok], np.asarray(out)[ok], rtol=1e-5,
                               atol=1e-5)


@given(data=st.data())
def test_causal_tile_skipping_never_skips_a_visible_key(data):
    S, bk = data.draw(st.sampled_from([(32, 4), (64, 16), (48, 8)]))
    B, T = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 8))
    window = data.draw(st.sampled_from([None, 1, 5, 20]))
    kv_len = np.array(data.draw(st.lists(st.integers(1, S), min_size=B, max_size=B)))
    q_pos = np.array(data.draw(st.lists(st.integers(0, S + 4), min_size=B, max_size=B)))[:, None] \
        + np.arange(T)
    lo, hi = (int(x) for x in tile_range(jnp.asarray(q_pos), jnp.asarray(kv_len), bk, S // bk,
                                         window))
    # Brute force, in numpy: the keys some query can see.
    k = np.arange(S)[None, None, :]
    q = q_pos[:, :, None]
    visible = (k <= q) & (k < kv_len[:, None, None])
    if window is not None:
        visible &= q - k < window
    tiles = {s // bk for s in np.nonzero(visible.any(axis=(0, 1)))[0]}
    assert all(lo <= t < hi for t in tiles)
    if tiles and window is None:
        assert max(tiles) == hi - 1        # and no tile is visited past the last visible one


def test_blockwise_attention_never_holds_an_S_by_S_matrix():
    S, H = 4096, 16
    args = [jax.ShapeDtypeStruct(s, d) for s, d in [((1, S, 1, H), jnp.float32),
                                                    ((1, 1, S, H), jnp.float32),
                                                    ((1, 1, S, H), jnp.float32),
                                                    ((1, S), jnp.int32), ((1,), jnp.int32)]]
    blockwise = program_memory(partial(flash_attention, block_q=256, block_k=256), *args)
    reference = program_memory(reference_at_positions, *args)
    square = S * S * 4
    # The measurement can see a square matrix: the reference holds at least one.
    assert reference.largest_array_bytes >= square and reference.temp_bytes >= square
    # The blockwise program's largest array is one tile of scores, its scratch memory
    # a small fraction of one S×S matrix.
    assert blockwise.largest_array_bytes <= 256 * 256 * 4
    assert blockwise.temp_bytes < square / 16
