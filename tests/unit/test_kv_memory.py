"""KV memory management: the first-fit allocator against a brute-force bitmap, the
simulation's accounting (the parts add up to the pool, everything finishes, nothing leaks),
and the paged scheme's waste against its one-partial-block bound."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.serving import memory_sim
from inferbook.serving.workloads import mixed_trace


def bitmap_first_fit(bitmap, size):
    run = 0
    for i, used in enumerate(bitmap):
        run = 0 if used else run + 1
        if run == size:
            start = i - size + 1
            bitmap[start:i + 1] = [True] * size
            return start
    return None


@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=60))
def test_first_fit_matches_a_bitmap(ops):
    cap = 40
    alloc, bitmap, live = memory_sim.FirstFit(cap), [False] * cap, []
    for do_alloc, x in ops:
        if do_alloc or not live:
            got, want = alloc.allocate(x), bitmap_first_fit(bitmap, x)
            assert got == want
            if got is not None:
                live.append((got, x))
        else:
            off, size = live.pop(x % len(live))
            alloc.free(off)
            bitmap[off:off + size] = [False] * size
        assert alloc.free_slots == bitmap.count(False)
        # Free extents are maximal: no two touch (they were merged).
        ext = alloc.extents()
        assert all(a + n < b for (a, n), (b, _) in zip(ext, ext[1:]))


@pytest.mark.parametrize("scheme", memory_sim.SCHEMES)
def test_accounting_closes_and_everything_finishes(scheme):
    reqs = memory_sim.synthetic_requests(150, seed=1, max_len=512, mean_prompt=60,
                                        mean_output=120)
    assert all(r.total <= 512 for r in reqs)
    b = memory_sim.simulate(reqs, 6_000, scheme, max_len=512, block_size=16)
    assert b.finished == len(reqs) and b.steps > 0
    assert abs(b.tokens + b.reserved + b.internal + b.external - 1) < 1e-9
    assert min(b.tokens, b.reserved, b.internal, b.external) >= 0
    if scheme == "oracle":
        assert b.internal == 0                  # exact reservations: nothing is never used
    if scheme == "paged":
        assert b.reserved == 0
        mean_len = np.mean([r.prompt + r.output / 2 for r in reqs])
        assert b.internal < memory_sim.paged_overhead_bound(mean_len, 16)


def test_paged_wastes_least_and_block_size_one_wastes_nothing_inside():
    reqs = memory_sim.synthetic_requests(200, seed=2, max_len=1024, mean_prompt=80,
                                        mean_output=200)
    waste = {s: memory_sim.simulate(reqs, 12_000, s, max_len=1024).waste
             for s in memory_sim.SCHEMES}
    assert waste["paged"] < waste["oracle"] < waste["pow2"] < waste["max"]
    assert memory_sim.simulate(reqs, 12_000, "paged", max_len=1024, block_size=1).internal == 0



def test_a_served_request_reduces_to_its_lengths():
    """The simulation's requests are the engine's, seen through their lengths alone."""
    trace = mixed_trace(20, 50, seed=3)
    lengths = [memory_sim.RequestLengths.of(r) for r in trace]
    assert [(x.prompt, x.output) for x in lengths] == [(len(r.prompt), r.max_new_tokens)
                                                       for r in trace]
    assert memory_sim.simulate(lengths, 2_000, "paged", max_len=512).finished == len(trace)
