"""The read roof: each read kernel reads (and writes) the bytes it counts, each counts by its
fastest run, and the roof is at least what every kernel and every memory-bound program
measured beside it achieved — so no MBU against it can exceed 100%."""

import jax
import numpy as np
import pytest

from inferbook.perf import read_roof
from inferbook.perf.read_roof import ReadRoof
from inferbook.perf.timing import Timing


def test_every_read_kernel_moves_the_bytes_it_counts():
    nbytes, D, F = 1 << 20, 64, 128
    reads = {r.name: r for r in read_roof.read_programs(nbytes, D, F, host=True)}
    assert set(reads) == {"XLA reduction", "XLA copy", "weight streaming", "host threads"}
    # The reduction sums nbytes / 4 float32 ones, the host read finds their maximum, the copy
    # reads them all and writes them back, in place, call after call (its reads counted).
    assert float(reads["XLA reduction"].run()) == nbytes / 4 == reads["XLA reduction"].nbytes / 4
    assert float(reads["host threads"].run()) == 1.0 and reads["host threads"].nbytes == nbytes
    for _ in range(2):
        copied = reads["XLA copy"].run()
        assert copied.shape == (nbytes // 4,) and reads["XLA copy"].nbytes == nbytes
        np.testing.assert_array_equal(np.asarray(copied), np.ones(nbytes // 4, np.float32))
    # The products run v (ones) through n distinct matrices, matrix i full of i, n of them
    # making half the reduction's bytes.
    n = nbytes // 2 // (D * F * 4)
    products = reads["weight streaming"].run()
    assert len(products) == n and reads["weight streaming"].nbytes == n * D * F * 4
    for i, out in enumerate(products):
        np.testing.assert_array_equal(out, np.full((1, F), D * i, np.float32))


def test_the_host_read_is_left_out_off_the_cpu_and_the_copy_on_request():
    names = [r.name for r in read_roof.read_programs(1 << 16, 16, 16, host=False, copy=False)]
    assert names == ["XLA reduction", "weight streaming"]
    default = [r.name for r in read_roof.read_programs(1 << 16, 16, 16)]
    assert ("host threads" in default) == (jax.devices()[0].platform == "cpu")


def test_the_roof_is_each_kernels_best_and_the_best_of_them():
    reads = read_roof.read_programs(1 << 16, 16, 16, host=False)
    roof = read_roof.best_rates(reads, [0.5, 0.25, 0.125])
    assert roof.rates == {r.name: r.nbytes / t for r, t in zip(reads, [0.5, 0.25, 0.125])}
    assert roof.best == max(roof.rates.values()) and roof.rates[roof.kernel] == roof.best
    later = ReadRoof({"XLA reduction": 1e12, "XLA copy": 1.0})
    merged = roof.merge(later)
    assert merged.rates["XLA reduction"] == 1e12 and merged.kernel == "XLA reduction"
    assert merged.rates["XLA copy"] == roof.rates["XLA copy"]         # the better of the two
    assert ReadRoof().best == 0.0 and ReadRoof().kernel is None
    record = merged.as_record()
    assert record == {"read_bytes_per_s": 1e12, "read_kernel": "XLA reduction",
                      "read_kernels": merged.rates}


@pytest.mark.parametrize("program_rate", [10.0, 1e15])
def test_a_program_faster_than_every_read_raises_the_roof_to_itself(program_rate):
    reads = ReadRoof({"XLA reduction": 100.0, "host threads": 200.0})
    roof = reads.with_program("decode step", program_rate)
    assert roof.best == max(200.0, program_rate)
    assert roof.kernel == ("decode step" if program_rate > 200.0 else "host threads")
    assert program_rate / roof.best <= 1.0            # no utilisation above 100%


def test_measuring_takes_the_fastest_run_after_a_warm_up():
    calls = []

    def slow_first():
        calls.append(len(calls))
        return np.float32(0)
    reads = [read_roof.Read("counting", slow_first, 1000)]
    roof = read_roof.measure_read_roof(reads=reads, repeats=3, warmup=2)
    assert len(calls) == 1 + 2 + 3                  # compile call, warm-up, timed runs
    assert roof.rates["counting"] > 0 and roof.kernel == "counting"
    assert read_roof.host_threads() >= 1


def _timing(*times):
    return Timing(float(np.median(times)), tuple(times), 1.0, "test device")


@pytest.mark.parametrize("program_times, roof_kernel", [((4.0, 2.0, 3.0), "host threads"),
                                                        ((0.4, 0.2, 0.5), "the step")])
def test_beside_the_reads_a_program_gets_the_roof_of_best_runs_and_the_typical_of_medians(
        monkeypatch, program_times, roof_kernel):
    # Known times per call (seconds) for two reads of 100 and 200 bytes and a program reading
    # 60: the roof divides by each one's fastest call, the typical rates by its median call.
    reads = [read_roof.Read("XLA reduction", lambda: None, 100),
             read_roof.Read("host threads", lambda: None, 200)]
    times = [(1.0, 2.0, 4.0), (1.0, 1.0, 8.0), program_times]
    seen = {}

    def fake(fns, rounds, warmup=0, lead_in=0, **_):
        seen.update(n=len(fns), rounds=rounds, warmup=warmup, lead_in=lead_in)
        return [_timing(*t) for t in times]
    monkeypatch.setattr(read_roof, "time_alternating", fake)
    got = read_roof.measure_beside(lambda: None, 60, reads, rounds=3, name="the step")
    assert seen == {"n": 3, "rounds": 3, "warmup": 1, "lead_in": 1}
    best_step = 60 / min(program_times)
    assert got.roof.rates == {"XLA reduction": 100.0, "host threads": 200.0,
                              "the step": best_step}
    assert got.roof.kernel == roof_kernel and got.roof.best == max(200.0, best_step)
    assert got.typical.rates == {"XLA reduction": 50.0, "host threads": 200.0}
    assert got.program_rate == 60 / np.median(program_times)
    assert got.utilisation == got.program_rate / got.roof.best <= 1.0
    assert got.share_of_typical == got.program_rate / 200.0


def test_a_read_timed_beside_the_reads_is_within_its_roof():
    # A real program that is itself a read: the same bytes as the reduction.
    reads = read_roof.read_programs(1 << 20, 64, 128, host=False, copy=False)
    x = jax.numpy.ones((1 << 18,), jax.numpy.float32)
    total = jax.jit(jax.numpy.sum)
    got = read_roof.measure_beside(lambda: total(x), x.nbytes, reads, rounds=3)
    assert got.program.device and len(got.program.times_s) >= 3
    assert set(got.typical.rates) == {"XLA reduction", "weight streaming"}
    for name, rate in got.typical.rates.items():      # a median run is never above the best
        assert 0 < rate <= got.roof.rates[name]
    assert 0 < got.utilisation <= 1.0 and got.share_of_typical > 0
