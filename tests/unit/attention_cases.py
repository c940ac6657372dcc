"""Random attention problems for the kernel tests, and the one comparison they all make.

A case is queries, a head-major cache and the positions that define the mask: ragged cache
lengths, queries anywhere from the start of the sequence to past its end (the padding rows of
a ragged prefill), MHA, GQA and MQA head ratios, an optional sliding window, float32 or
bfloat16. Every kernel's output and log-sum-exp are compared with `attention_reference`
computed in float32 on the same (already rounded) inputs, on the rows that can see at least
one key; rows that see none must come back finite.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from inferbook.model.attention import attention_mask, reference_at_positions


class Case(NamedTuple):
    q: jnp.ndarray          # [B, T, N, H]
    k: jnp.ndarray          # [B, K, S, H]
    v: jnp.ndarray
    q_pos: jnp.ndarray      # [B, T]
    kv_len: jnp.ndarray     # [B]
    window: int | None

    @property
    def S(self) -> int:
        return self.k.shape[2]

    @property
    def arrays(self) -> tuple:
        """(q, k, v, q_pos, kv_len): the positional arguments every kernel takes."""
        return self.q, self.k, self.v, self.q_pos, self.kv_len


@st.composite
def cases(draw, max_T: int = 12, S_choices=(8, 16, 24, 32), dtypes=("float32", "bfloat16"),
          windows=(None, 3, 9)) -> Case:
    B = draw(st.integers(1, 3))
    K = draw(st.sampled_from([1, 2]))
    G = draw(st.sampled_from([1, 2, 3]))            # K=1: MQA; G=1: MHA; else GQA
    H = draw(st.sampled_from([4, 8, 16]))
    S = draw(st.sampled_from(S_choices))
    T = draw(st.integers(1, max_T))
    dtype = jnp.dtype(draw(st.sampled_from(dtypes)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kv_len = rng.integers(1, S + 1, size=B)
    # Queries start anywhere from position 0 (a prefill) to just past the cache (a decode
    # step); rows beyond a sequence's length are the padding of a ragged batch.
    start = np.array([rng.integers(0, n + 1) for n in kv_len])
    q_pos = start[:, None] + np.arange(T)[None, :]

    def normal(*shape):
        return jnp.asarray(rng.normal(size=shape) * 1.5, dtype)

    return Case(normal(B, T, K * G, H), normal(B, K, S, H), normal(B, K, S, H),
                jnp.asarray(q_pos, jnp.int32), jnp.asarray(kv_len, jnp.int32),
                draw(st.sampled_from(windows)))


# Jitted: run op by op, the reference would compile every operation for every new shape.
_reference = jax.jit(reference_at_positions, static_argnames=("window",))
_mask = jax.jit(attention_mask, static_argnames=("window",))


def visible_rows(case: Case) -> np.ndarray:
    """[B, T]: queries that see at least one key."""
    mask = _mask(case.q_pos, jnp.arange(case.S), case.kv_len, window=case.window)
    return np.asarray(mask.any(axis=-1))


def assert_matches_reference(case: Case, out, lse) -> None:
    f32 = [x.astype(jnp.float32) for x in (case.q, case.k, case.v)]
    ref_out, ref_lse = _reference(*f32, case.q_pos, case.kv_len, window=case.window)
    rows = visible_rows(case)
    assert out.shape == case.q.shape and out.dtype == case.q.dtype
    assert lse.shape == case.q.shape[:3] and lse.dtype == jnp.float32
    out, lse = np.asarray(out.astype(jnp.float32)), np.asarray(lse)
    assert np.isfinite(out).all() and not np.isnan(lse).any()
    low = case.q.dtype == jnp.bfloat16
    tol = dict(rtol=3e-2, atol=3e-2) if low else dict(rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out[rows], np.asarray(ref_out)[rows], **tol)
    np.testing.assert_allclose(lse[rows], np.asarray(ref_lse)[rows],
                               **(dict(rtol=1e-2, atol=1e-2) if low else tol))
