"""Eviction policies: with room for everything they are exact attention; under a budget they
keep exactly the tokens a brute-force replay of the policy keeps, never more than the budget."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.memory import kv_evict
from inferbook.model import decoder
from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig


@jax.jit
def causal_reference(q, k, v):
    B, T = q.shape[:2]
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask = attention_mask(pos, pos[0], jnp.full((B,), T))
    return attention_reference(q, k.swapaxes(1, 2), v.swapaxes(1, 2), mask)[0]


def replay(q, k, v, budget, policy, n_sink, n_recent):
    """The policy in plain numpy, one head at a time: the positions kept at the end."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, T, N, H = q.shape
    K = k.shape[2]
    G = N // K
    kept = {}
    for b in range(B):
        for h in range(K):
            cache, score = [], {}
            for t in range(T):
                cand = cache + [t]
                s = np.stack([q[b, t, h * G + g] @ k[b, cand, h].T for g in range(G)]) / np.sqrt(H)
                p = np.exp(s - s.max(-1, keepdims=True))
                p /= p.sum(-1, keepdims=True)
                for j, pos in enumerate(cand):
                    score[pos] = score.get(pos, 0.0) + p[:, j].sum()
                if len(cand) > budget:
                    if policy == "streaming":
                        rank = {x: (np.inf if x < n_sink else x) for x in cand}
                    else:
                        rank = {x: (np.inf if x > t - n_recent else score[x]) for x in cand}
                    cand.remove(min(cand, key=lambda x: (rank[x], cand.index(x))))
                cache = cand
            kept[b, h] = sorted(cache)
    return kept


@pytest.mark.parametrize("policy,n_sink,n_recent", [("streaming", 2, 0), ("streaming", 0, 0),
                                                    ("h2o", 0, 3), ("h2o", 0, 0)])
def test_kept_tokens_match_a_replay(policy, n_sink, n_recent):
    B, T, K, G, H = 2, 24, 2, 2, 8
    q, k, v = kv_evict.structured_stream(jax.random.key(3), B, T, K, G, H, heavy_fraction=0.2)
    for budget in (5, 9):
        out, cache = kv_evict.attend_stream(q, k, v, 12, budget, policy, n_sink, n_recent)
        want = replay(q, k, v, budget, policy, n_sink, n_recent)
        pos = np.asarray(cache.pos)
        for (b, h), kept in want.items():
            got = sorted(int(x) for x in pos[b, h] if x >= 0)
            assert got == kept, (b, h, got, kept)
            assert len(got) == budget                   # exactly the budget, once it is full
        # Until the cache is full nothing is evicted: those outputs are exact.
        ref = causal_reference(q, k, v)
        np.testing.assert_allclose(out[:, :budget], ref[:, :budget], atol=1e-5)


@pytest.mark.parametrize("policy", kv_evict.POLICIES)
def test_with_room_for_everything_it_is_attention(policy):
    q, k, v = kv_evict.structured_stream(jax.random.key(0), 2, 20, 2, 3, 8)
    out, cache = kv_evict.attend_stream(q, k, v, 20, 20, policy, 2, 4)
    np.testing.assert_allclose(out, causal_reference(q, k, v), atol=1e-5)
    cfg = ModelConfig(L=2, D=32, F=48, N=4, K=2, H=8, V=61, max_seq_len=64)
    params = decoder.init_params(cfg, seed=2)
    tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, cfg.V)
    logits = kv_evict.model_logits(params, cfg, tokens, 12, 12, policy, 2, 4)
    np.testing.assert_allclose(logits, decoder.forward(params, cfg, tokens), atol=2e-4)
    # ... and with less room it is not.
    tight = kv_evict.model_logits(params, cfg, tokens, 12, 4, policy, 2, 2)
    assert not np.allclose(tight, decoder.forward(params, cfg, tokens), atol=1e-3)


def test_error_shrinks_with_the_budget_and_h2o_finds_heavy_hitters():
    B, T, K, G, H = 1, 256, 2, 2, 32
    q, k, v = kv_evict.structured_stream(jax.random.key(5), B, T, K, G, H)
    ref = causal_reference(q, k, v)
    err = {p: [kv_evict.relative_error(kv_evict.attend_stream(q, k, v, 128, b, p, 4, n)[0], ref,
                                       v, b) for b, n in ((16, 8), (64, 32), (128, 64))]
           for p in kv_evict.POLICIES}
    for e in err.values():
        assert e[0] > e[1] > e[2] > 0
    assert all(h < s for h, s in zip(err["h2o"], err["streaming"]))
