"""The read roof: each read kernel reads (and writes) the bytes it counts, each counts by its
fastest run, and the roof is at least what every kernel and every memory-bound program
measured beside it achieved — so no MBU against it can exceed 100%."""

import jax
import numpy as np
import pytest

from inferbook.perf import read_roof
from inferbook.perf.read_roof import ReadRoof


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
