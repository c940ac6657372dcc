"""Speculative decoding leaves the output unchanged.

Greedy: the tokens equal `decode.generate`'s, exactly, for a draft model and for prompt lookup.

Sampling: the tokens must follow the target's distribution. We draw many independent
speculative generations (vmapped, fixed seeds) and compare the joint distribution of the first
two emitted tokens with the exact target probabilities p(z1) · p(z2 | z1) by a chi-square
goodness-of-fit test. Two emitted tokens cover every path of the rule: rejection at the first
or second draft, the residual distribution, the bonus token after a full accept, and a second
round. Each test fails when its p-value is below 1e-3, so a correct implementation would fail
with probability 0.1% per test for a random seed; the seeds are fixed, so the outcome is
deterministic. Cells the target gives probability zero (top-k filtering) must be empty.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.sampling import Sampler
from inferbook.perf import speculation
from inferbook.serving.draft import DraftModel, PromptLookup, draft_and_verify, truncated_draft
from inferbook.serving.speculative import probabilities, speculative_generate, verify

ALPHA_TEST = 1e-3


def goodness_of_fit(observed, expected_probs, n):
    """Chi-square p-value over the cells with positive probability; zero cells stay empty."""
    observed = np.ravel(observed).astype(np.float64)
    expected_probs = np.ravel(expected_probs).astype(np.float64)
    zero = expected_probs < 1e-9
    assert observed[zero].sum() == 0, "a token the target never emits was emitted"
    exp = expected_probs[~zero] / expected_probs[~zero].sum() * observed.sum()
    assert exp.min() >= 5, "too few samples for a chi-square test"
    return chisquare(observed[~zero], exp).pvalue


# The rule alone, on synthetic context-dependent distributions --------------------------------

def synthetic(V, seed, onehot_draft):
    rng = np.random.default_rng(seed)

    def d(*shape):
        return rng.dirichlet(np.ones(V), size=shape)

    p1, p2, p3 = d(), d(V), d(V, V)                  # p(x1), p(x2|x1), p(x3|x1,x2)
    if onehot_draft:                                 # a deterministic drafter: guesses 0, 1, 2...
        q1, q2 = np.eye(V)[0], np.eye(V)[(np.arange(V) + 1) % V]
    else:
        q1, q2 = d(), d(V)
    return [jnp.asarray(a, jnp.float32) for a in (p1, p2, p3, q1, q2)]


def first_two_tokens(tables, key):
    """Two rounds of the rule with γ = 2 (then γ = 1), returning the first two tokens."""
    p1, p2, p3, q1, q2 = tables
    k = jax.random.split(key, 6)
    x1 = jax.random.categorical(k[0], jnp.log(q1))
    x2 = jax.random.categorical(k[1], jnp.log(q2[x1]))
    drafts = jnp.stack([x1, x2])
    n, y = verify(drafts, jnp.stack([q1, q2[x1]]), jnp.stack([p1, p2[x1], p3[x1, x2]]),
                  jnp.int32(2), k[2], False)
    # Round two after a full rejection: the context is [y]; draft one token.
    x1b = jax.random.categorical(k[3], jnp.log(q2[y]))
    n2, y2 = verify(x1b[None], q2[y][None], jnp.stack([p2[y], p3[y, x1b]]), jnp.int32(1),
                    k[4], False)
    second_round = jnp.where(n2 >= 1, x1b, y2)
    z1 = jnp.where(n >= 1, x1, y)
    z2 = jnp.where(n >= 2, x2, jnp.where(n == 1, y, second_round))
    return z1, z2, n


@pytest.mark.parametrize("onehot_draft", [False, True])
def test_rejection_sampling_reproduces_the_target_distribution(onehot_draft):
    V, N = 4, 40_000
    tables = synthetic(V, seed=3, onehot_draft=onehot_draft)
    z1, z2, n = jax.jit(jax.vmap(lambda k: first_two_tokens(tables, k)))(
        jax.random.split(jax.random.key(0), N))
    observed = np.zeros((V, V))
    np.add.at(observed, (np.asarray(z1), np.asarray(z2)), 1)
    p1, p2 = np.asarray(tables[0]), np.asarray(tables[1])
    assert goodness_of_fit(observed, p1[:, None] * p2, N) > ALPHA_TEST
    # The first draft survives with probability Σ min(p, q) (the acceptance rate α).
    alpha = speculation.acceptance_rate(p1, np.asarray(tables[3]))
    accepted = float(np.mean(np.asarray(n) >= 1))
    assert abs(accepted - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / N) + 1e-9


def test_a_wrong_rule_is_caught():
    """The test has power: drawing the replacement from p instead of the residual is biased."""
    V, N = 4, 40_000
    tables = synthetic(V, seed=3, onehot_draft=False)
    p1, q1 = tables[0], tables[3]

    def wrong(key):
        k1, k2, k3 = jax.random.split(key, 3)
        x = jax.random.categorical(k1, jnp.log(q1))
        keep = jax.random.uniform(k2) * q1[x] < p1[x]
        return jnp.where(keep, x, jax.random.categorical(k3, jnp.log(p1)))

    z = np.asarray(jax.jit(jax.vmap(wrong))(jax.random.split(jax.random.key(0), N)))
    assert goodness_of_fit(np.bincount(z, minlength=V), np.asarray(p1), N) < ALPHA_TEST


# The whole loop on the library's models ----------------------------------------------------

CFG = ModelConfig(L=2, D=32, F=64, N=4, K=2, H=8, V=40)
PARAMS = decoder.init_params(CFG, seed=2)


def test_model_draft_rounds_sample_from_the_target():
    """Two vmapped draft-and-verify rounds with an unrelated draft model (γ = 2)."""
    cfg = CFG.replace(V=6)
    target = decoder.init_params(cfg, seed=5)
    dcfg = cfg.replace(L=1, D=16, F=32)
    draft = decoder.init_params(dcfg, seed=6)
    sampler, gamma, N = Sampler(temperature=1.0, top_k=5), 2, 4000
    prompt, last = [1, 2, 3, 4], 5
    dstate = DraftModel(draft, dcfg).start(prompt, 32)
    cache = decode.prefill(target, cfg, np.array([prompt]), np.array([len(prompt)]),
                           kvcache.init_cache(cfg, 1, 32))[1]

    def rnd(c, dc, feed, nf, key_data):
        return draft_and_verify(target, cfg, draft, dcfg, c, dc, feed, nf,
                                jax.random.wrap_key_data(key_data), gamma, sampler)

    # One compiled program for both rounds; host-side glue in numpy (each eager JAX op
    # would compile a program of its own).
    vround = jax.jit(jax.vmap(rnd))
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(1), 2 * N)))

    def many(tree):
        return jax.tree.map(lambda a: np.broadcast_to(np.asarray(a), (N, *a.shape)), tree)

    n, y, xs, c1, dc1 = vround(many(cache), many(dstate.cache),
                               many(np.array([last, 0], np.int32)),
                               np.ones(N, np.int32), keys[:N])
    n, y, xs = map(np.asarray, (n, y, xs))
    feed = np.where((n == gamma)[:, None], np.stack([xs[:, -1], y], 1),
                    np.stack([y, np.zeros_like(y)], 1)).astype(np.int32)
    n2, y2, xs2, _, _ = vround(c1, dc1, feed, np.where(n == gamma, 2, 1).astype(np.int32),
                               keys[N:])
    n2, y2, xs2 = map(np.asarray, (n2, y2, xs2))
    z1 = np.where(n >= 1, xs[:, 0], y)
    z2 = np.where(n >= 2, xs[:, 1], np.where(n == 1, y, np.where(n2 >= 1, xs2[:, 0], y2)))
    observed = np.zeros((cfg.V, cfg.V))
    np.add.at(observed, (z1, z2), 1)
    seqs = np.array([prompt + [last, z] for z in range(cfg.V)])
    probs = np.asarray(probabilities(decoder.forward(target, cfg, seqs)[:, -2:], sampler))
    p1, p2 = probs[0, 0], probs[:, 1]
    assert 0 < (n >= 1).mean() < 1, "both acceptance and rejection must occur"
    assert goodness_of_fit(observed, p1[:, None] * p2, N) > ALPHA_TEST


@given(prompt=st.lists(st.integers(0, CFG.V - 1), min_size=1, max_size=12),
       gamma=st.sampled_from([1, 3]), kind=st.sampled_from(["layers", "other", "lookup"]))
@settings(max_examples=8)
def test_greedy_speculative_decoding_equals_greedy_decoding(prompt, gamma, kind):
    layers = truncated_draft(PARAMS, CFG, 1)
    # An unrelated draft of the same shape (and config, so the compiled round is shared).
    other = DraftModel(decoder.init_params(layers.cfg, seed=9), layers.cfg)
    drafter = {"layers": layers, "other": other, "lookup": PromptLookup()}[kind]
    out, stats = speculative_generate(PARAMS, CFG, prompt, 12, drafter, gamma=gamma)
    assert out == decode.generate(PARAMS, CFG, [prompt], 12).tokens[0]
    assert sum(a + 1 for a in stats.accepted) >= len(out) - 1


def test_eos_stops_speculative_decoding_where_generate_stops():
    free = decode.generate(PARAMS, CFG, [[1, 2, 3]], 12).tokens[0]
    eos = free[5]
    out, _ = speculative_generate(PARAMS, CFG, [1, 2, 3], 12, truncated_draft(PARAMS, CFG, 1),
                                  gamma=3, eos_id=eos)
    assert out == decode.generate(PARAMS, CFG, [[1, 2, 3]], 12, eos_id=eos).tokens[0]


def test_a_draft_identical_to_the_target_is_always_accepted():
    out, stats = speculative_generate(PARAMS, CFG, [1, 2, 3], 13, truncated_draft(PARAMS, CFG, 2),
                                      gamma=3, sampler=Sampler(1.0), key=jax.random.key(4))
    assert stats.acceptance_rate == 1.0 and stats.accepted == [3, 3, 3]
    assert len(out) == 13


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    lookup = PromptLookup(max_ngram=2)
    assert lookup.propose([7, 8, 9, 1, 7, 8], 3) == [9, 1, 7]
    assert lookup.propose([1, 2, 3], 3) == []
    assert lookup.propose([5, 1, 5], 2) == [1, 5]


def test_expected_tokens_formula_matches_the_iid_model():
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for gamma in (1, 4):
            p_n = [alpha ** k * (1 - alpha) for k in range(gamma)] + [alpha ** gamma]
            exact = sum((k + 1) * p for k, p in enumerate(p_n))
            assert speculation.expected_tokens_per_step(alpha, gamma) == pytest.approx(exact)
    assert speculation.speculative_speedup(0.8, 4, 0.0) == pytest.approx(
        speculation.expected_tokens_per_step(0.8, 4))
    assert speculation.optimal_gamma(0.0, 0.1) == 0
    assert speculation.optimal_gamma(0.9, 0.05) > 3
