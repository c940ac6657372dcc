"""Sharded generation as a job of several local processes, and what each process did.

The book's evidence that a multi-controller program is the one-process program: run the same
cases — a model, a mesh, a layout, prompts — as a job of local processes (each with its
share of CPU devices, joined over gloo, `multihost.join`) and compare with one process:

  * the tokens (`sharded_decode.generate`, unchanged);
  * what each process holds and reads: the bytes of weights on its devices, and, loading a
    checkpoint (`checkpoint_shards`), the bytes of the files it read;
  * the collectives of the compiled prefill and decode step (`compiled_collectives`), read
    from the optimized HLO as `perf.hlo` reads every program of the book.

`run_cases` starts the job (`local_job.run_workers`, CPU devices only, whatever the host
has) and returns process 0's report of each case; run as ``python -m
inferbook.parallel.multihost_report`` this module is the worker. Only process 0 reports,
after gathering the per-process figures with `multihost_utils.process_allgather`.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from inferbook.parallel.local_job import die_with_parent, run_workers
from inferbook.parallel.multihost import JobError, JobSpec, free_port

__all__ = ["Case", "compiled_collectives", "run_case", "run_cases", "run_as_worker"]

WORKER = [sys.executable, "-u", "-m", "inferbook.parallel.multihost_report"]


@dataclass(frozen=True)
class Case:
    """One generation to run in the job: a preset with random weights (`model`, `seed`) or a
    checkpoint directory, on a mesh of the job's devices with a layout; `programs` adds the
    compiled programs' collectives to the report."""

    mesh: tuple[int, ...]
    layout: str
    prompts: tuple[tuple[int, ...], ...]
    new_tokens: int
    model: str | None = None
    seed: int = 0
    checkpoint: str | None = None
    programs: bool = False


def compiled_collectives(cfg: Any, plan: Any, batch: int, prompt_len: int,
                         max_len: int) -> dict[str, list[list]]:
    """The collectives of the sharded prefill (`batch` prompts padded to `prompt_len`) and
    decode step, compiled from shapes on the plan's mesh: [kind, bytes, group size, label,
    device groups] each, in program order. The same call in one process and in each
    process of a job reads the programs the two compile."""
    import jax
    import jax.numpy as jnp

    from inferbook.parallel import sharded_decode as sd
    from inferbook.perf import hlo
    params, cache = sd.abstract_inputs(cfg, plan, batch, max_len)
    tokens = jax.ShapeDtypeStruct((batch, prompt_len), jnp.int32)
    lengths = jax.ShapeDtypeStruct((batch,), jnp.int32)
    programs = {"prefill": hlo.compile_fn(sd.prefill, params, cfg, plan, tokens, lengths, cache),
                "decode": hlo.compile_fn(sd.decode_step, params, cfg, plan, lengths, cache)}
    return {name: [[c.kind, c.bytes, c.group_size, c.scope, [list(g) for g in c.groups]]
                   for c in hlo.collectives(compiled)] for name, compiled in programs.items()}


def run_case(case: Case) -> dict[str, Any] | None:
    """Run `case` in this process of a joined job: process 0's report, None elsewhere."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding

    from inferbook.model.decoder import init_params
    from inferbook.model.presets import get_preset
    from inferbook.parallel import multihost
    from inferbook.parallel import sharded_decode as sd
    from inferbook.parallel.checkpoint_shards import CheckpointShards
    from inferbook.parallel.sharding import make_plan, param_specs, shard_params
    mesh = multihost.global_mesh(case.mesh)
    read = 0
    if case.checkpoint is not None:
        shards = CheckpointShards(case.checkpoint)
        cfg = shards.cfg
        plan = make_plan(cfg, mesh, case.layout)
        params = shards.load(jax.tree.map(lambda s: NamedSharding(mesh, s),
                                          param_specs(cfg, plan)), jnp.float32)
        read = shards.bytes_read
    else:
        cfg = get_preset(case.model)
        plan = make_plan(cfg, mesh, case.layout)
        params = shard_params(init_params(cfg, case.seed), cfg, plan)
    prompts = [list(p) for p in case.prompts]
    tokens = sd.generate(params, cfg, prompts, case.new_tokens, plan=plan).tokens
    mine = np.array([multihost.addressable_bytes(params), read], np.int64)
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 2)
    report = {"tokens": tokens, "held": every[:, 0].tolist(), "read": every[:, 1].tolist()}
    if case.programs:                                    # the shapes generate compiled
        B = len(prompts) + (-len(prompts) % sd.batch_multiple(plan))
        T = -(-max(len(p) for p in prompts) // 16) * 16
        report["collectives"] = compiled_collectives(cfg, plan, B, T, T + case.new_tokens)
    return report if multihost.is_primary() else None


def run_cases(cases: Sequence[Case], processes: int = 2,
              timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Run every case in one job of `processes` local processes (each with an equal share
    of the cases' mesh, which must be the same size for all); process 0's reports, in order.
    JobError, in one line, if the job fails."""
    sizes = {math.prod(c.mesh) for c in cases}
    if len(sizes) != 1 or next(iter(sizes)) % processes:
        raise JobError(f"every case needs a mesh of the same size, a multiple of {processes} "
                       f"processes; got sizes {sorted(sizes)}")
    devices = next(iter(sizes)) // processes
    port = free_port()
    payloads = [(JobSpec(f"127.0.0.1:{port}", processes, i, timeout_s), devices, list(cases))
                for i in range(processes)]
    out = io.StringIO()
    code, line = run_workers(WORKER, payloads, range(processes), processes, stdout=out,
                             env={"JAX_PLATFORMS": "cpu"}, timeout_s=timeout_s)
    if code:
        raise JobError(line)
    return [json.loads(row) for row in out.getvalue().splitlines() if row.startswith("{")]


def run_as_worker() -> int:
    """The worker: join the job from the payload on stdin, run its cases, report."""
    die_with_parent()
    job, devices, cases = pickle.load(sys.stdin.buffer)
    output = os.fdopen(os.dup(1), "w", buffering=1)    # gloo writes to the C-level stdout
    os.dup2(2, 1)
    from inferbook.parallel import multihost
    from inferbook.parallel.devices import setup
    multihost.join(job, devices)
    setup(devices)
    for case in cases:
        report = run_case(case)
        if report is not None:
            output.write(json.dumps(report) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run_as_worker())
