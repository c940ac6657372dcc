"""Measuring attention kernels: memory from the compiled program, time on the device.

Two kinds of measurement, kept apart because one is exact and the other is not:

  * Memory comes from XLA's buffer assignment of the compiled program
    (`inferbook.perf.compiled.program_memory`): the scratch bytes it allocates for
    intermediates and the largest array any instruction produces. Nothing is run, so it
    costs a compile, works for sizes that would not fit, and gives the same number on every
    run. `attention_inputs(..., abstract=True)` gives it the shapes alone.
  * Time comes from running on the reader's device (`timing.time_fn`: medians after warm-up).

`decode_rows` times decode attention against context length for the kernels of chapter 7
and reports the KV bytes each step must read and the bandwidth that implies. On a GPU it
includes the Pallas Flash-Decoding kernel split and unsplit; `inferbook kernel-bench --out`
saves such a sweep with its device, date and versions for the book.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from inferbook.kernels.flash_decoding import flash_decoding
from inferbook.kernels.pallas import pallas_flash_decoding
from inferbook.model.attention import reference_at_positions
from inferbook.perf.hardware import chip_for_device
from inferbook.perf.timing import time_fn

__all__ = ["attention_inputs", "decode_kernels", "decode_rows"]


def attention_inputs(B: int, T: int, S: int, N: int, K: int, H: int, dtype: Any = "float32",
                     seed: int = 0, abstract: bool = False) -> tuple:
    """(q, k, v, q_pos, kv_len) for a full cache of S keys and T queries at its end.

    T = S is a causal prefill; T = 1 a decode step. With abstract=True, shapes only
    (jax.ShapeDtypeStruct), for `compiled.program_memory` at sizes never allocated.
    """
    shapes = [((B, T, N, H), dtype), ((B, K, S, H), dtype), ((B, K, S, H), dtype)]
    if abstract:
        return tuple(jax.ShapeDtypeStruct(s, d) for s, d in shapes) + (
            jax.ShapeDtypeStruct((B, T), jnp.int32), jax.ShapeDtypeStruct((B,), jnp.int32))
    keys = jax.random.split(jax.random.key(seed), 3)
    q, k, v = (jax.random.normal(key, s, jnp.float32).astype(d)
               for key, (s, d) in zip(keys, shapes))
    q_pos = jnp.broadcast_to(jnp.arange(S - T, S, dtype=jnp.int32), (B, T))
    return q, k, v, q_pos, jnp.full((B,), S, jnp.int32)


def decode_kernels(num_splits: int, pallas: bool) -> dict[str, Callable]:
    """The decode-attention variants chapter 7 compares, each (q, k, v, q_pos, kv_len) -> out."""
    kernels = {"unsplit (XLA reference)": reference_at_positions,
               f"split, P={num_splits} (XLA)": functools.partial(flash_decoding,
                                                                num_splits=num_splits)}
    if pallas:
        kernels["unsplit (Pallas, P=1)"] = functools.partial(pallas_flash_decoding, num_splits=1,
                                                             block_k=128)
        kernels[f"Flash-Decoding (Pallas, P={num_splits})"] = functools.partial(
            pallas_flash_decoding, num_splits=num_splits, block_k=128)
    return {name: jax.jit(lambda *a, f=f: f(*a)[0]) for name, f in kernels.items()}


def decode_rows(contexts: list[int], B: int = 1, N: int = 32, K: int = 8, H: int = 128,
                dtype: str = "bfloat16", num_splits: int = 32, pallas: bool | None = None,
                repeats: int = 10) -> list[dict]:
    """Time one decode step's attention per kernel and context length S.

    Each row: kernel, S, median seconds, KV bytes read (2·B·K·S·H·bytes: every key and value
    once), achieved bytes/s, and the fraction of the chip's HBM bandwidth where it is known.
    Pallas kernels are included on accelerators (pallas=None) — interpreted on a CPU they
    measure the interpreter, not the kernel.
    """
    if pallas is None:
        pallas = jax.default_backend() != "cpu"
    chip = chip_for_device(jax.devices()[0].device_kind)
    rows = []
    for S in contexts:
        args = attention_inputs(B, 1, S, N, K, H, dtype)
        kv_bytes = 2 * B * K * S * H * jnp.dtype(dtype).itemsize
        for name, fn in decode_kernels(num_splits, pallas).items():
            t = time_fn(fn, *args, repeats=repeats)
            rows.append(dict(kernel=name, S=S, B=B, N=N, K=K, H=H, dtype=dtype,
                             seconds=t.median_s, kv_bytes=kv_bytes,
                             bytes_per_s=kv_bytes / t.median_s,
                             hbm_fraction=(kv_bytes / t.median_s / chip.hbm_bytes_per_s
                                           if chip else None)))
    return rows
