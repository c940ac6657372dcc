"""The question sets of chapters 6–13: references, mistakes, and checks that can fail.

The exercise notebooks themselves are run by tests/book (solutions score full marks); here
each set is checked on its own, quickly: every known mistake is distinguishable from the right
answer, every coding check rejects a plausible wrong function, and the references that are
built from the library agree with an independent computation.
"""

import math

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from inferbook.grading import registry
from inferbook.grading.questions import Function, Numeric

SETS = [f"ch{n:02d}" for n in range(6, 14)]


def test_every_chapter_from_6_to_13_has_questions():
    assert set(SETS) <= set(registry.set_ids())
    for s in SETS:
        assert registry.questions_in(s), s


@pytest.mark.parametrize("set_id", SETS)
def test_numeric_references_are_finite_and_mistakes_are_not_the_answer(set_id):
    for q in registry.questions_in(set_id):
        if isinstance(q, Numeric):
            want = float(q.reference())
            assert math.isfinite(want) and want != 0, q.id
            assert q.grade(want).status == "passed"
            for mistake in q.mistakes:
                wrong = float(mistake.value(want))
                result = q.grade(wrong)
                assert result.status == "failed" and result.message == mistake.message, q.id


def _perturbed(reference):
    """A wrong answer of the right type and shape: every float output off by 1%."""
    def wrong(*args):
        out = reference(*args)
        if isinstance(out, tuple):
            return tuple(np.asarray(o) * 1.01 + 0.01 for o in out)
        return np.asarray(out) + 1
    return wrong


@pytest.mark.parametrize("set_id", SETS)
def test_every_coding_check_passes_the_reference_and_fails_a_wrong_answer(set_id):
    for q in registry.questions_in(set_id):
        if isinstance(q, Function) and q.id != "ch10.ws2d_mlp":
            assert q.grade(q.reference).status == "passed", q.id
            assert q.grade(_perturbed(q.reference)).status == "failed", q.id


def _ws2d(body):
    from inferbook.parallel.mesh import named_mesh, shard_map
    return jax.jit(shard_map(body, named_mesh((2, 4)),
                             in_specs=(P(None, ("x", "y")), P("x", "y"), P("y", "x")),
                             out_specs=P(None, ("x", "y"))))


def test_the_2d_check_needs_every_collective():
    q = registry.get("ch10.ws2d_mlp")

    def body(x, w_in, w_out, reduce_x=True):
        x = jax.lax.all_gather(x, "y", axis=1, tiled=True)
        h = x @ w_in
        h = jax.lax.psum(h, "x") if reduce_x else h
        return jax.lax.psum_scatter(jax.nn.gelu(h) @ w_out, "y", scatter_dimension=1,
                                    tiled=True)

    assert q.grade(_ws2d(body)).status == "passed"
    # Forgetting the AllReduce over X leaves each device with its own partial sums.
    no_psum = _ws2d(lambda x, a, b: body(x, a, b, reduce_x=False))
    assert q.grade(no_psum).status == "failed"


def test_the_prefix_match_reference_agrees_with_the_radix_tree_and_brute_force():
    from inferbook.serving import BlockManager, RadixCache
    q = registry.get("ch12.prefix_match")

    def radix(cached, prompt, bs):
        bm = BlockManager(1000, bs)
        cache = RadixCache(bm)
        for p in cached:
            table = []
            bm.grow(table, len(p))
            cache.insert(p, table)
            bm.release(table)
        return cache.peek(prompt)

    def brute(cached, prompt, bs):
        best = 0
        for old in cached:
            k = 0
            while ((k + 1) * bs <= min(len(old), len(prompt))
                   and old[k * bs:(k + 1) * bs] == prompt[k * bs:(k + 1) * bs]):
                k += 1
            best = max(best, k * bs)
        return best

    cases = q.cases(q.rng())
    assert any(q.reference(*c) > 0 for c in cases)       # the cases do hit the cache
    for c in cases:
        assert q.reference(*c) == radix(*c) == brute(*c)


def test_accept_is_the_rule_verify_applies():
    import jax.numpy as jnp

    from inferbook.serving.speculative import accept, verify
    rng = np.random.default_rng(0)
    G, V = 4, 6
    for seed in range(5):
        p = jnp.asarray(rng.dirichlet(np.ones(V), G + 1), jnp.float32)
        q = jnp.asarray(rng.dirichlet(np.ones(V), G), jnp.float32)
        drafts = jnp.asarray(rng.integers(0, V, G), jnp.int32)
        key = jax.random.key(seed)
        k_accept, k_draw = jax.random.split(key)
        n, dist = accept(drafts, q, p, G, jax.random.uniform(k_accept, (G,)))
        n_v, y = verify(drafts, q, p, G, key, greedy=False)
        assert int(n) == int(n_v)
        assert int(y) == int(jax.random.categorical(k_draw, jnp.log(dist)))
        assert float(dist[int(y)]) > 0


def test_the_interleaved_schedule_matches_a_hand_simulation():
    from inferbook.grading.chapters import ch11
    waiting, running, steps = list(ch11.OUTPUT_LENGTHS), [], 0
    while waiting or running:
        while waiting and len(running) < ch11.SLOTS:
            left = waiting.pop(0) - 1
            if left > 0:
                running.append(left)
        if running:
            steps += 1
            running = [r - 1 for r in running if r > 1]
    assert registry.get("ch11.interleaved_steps").reference() == steps
    static = sum(max(ch11.OUTPUT_LENGTHS[i:i + ch11.SLOTS]) - 1
                 for i in range(0, len(ch11.OUTPUT_LENGTHS), ch11.SLOTS))
    assert registry.get("ch11.static_steps").reference() == static
