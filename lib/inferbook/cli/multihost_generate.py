"""One process of `inferbook generate --processes N` (or `--coordinator ...`): the worker.

`cli.launch` starts this module once per process (``python -m inferbook.cli.multihost_generate``)
and writes the command's parsed arguments to its stdin, with the process's place in the job
(`multihost.JobSpec`) and its share of CPU devices. The worker then runs the multi-controller
program, in the order JAX requires:

  1. join the job (`multihost.join`), before anything else touches JAX;
  2. the whole job's mesh and the layout's plan (`multihost.global_mesh`, `make_plan`);
  3. the weights, each process placing only its devices' blocks: read from a checkpoint
     block by block (`checkpoint_shards`), or a preset's random weights, drawn alike in
     every process from the same seed;
  4. `sharded_decode.generate`, the same loop as in one process;
  5. process 0 prints, as `inferbook generate` does; with --json it adds, per process, the
     bytes of weights its devices hold and the checkpoint bytes it read.

Bad input ends the worker with the command line's one-line error and exit code 2, which the
supervisor passes on.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from typing import Any

from . import UsageError

__all__ = ["run_process", "main"]


def _sampler(args: argparse.Namespace) -> Any:
    from inferbook.model.sampling import GREEDY, Sampler
    if args.temperature is None:
        if args.top_k is not None or args.top_p is not None:
            raise UsageError("--top-k and --top-p need --temperature")
        return GREEDY
    try:
        return Sampler(args.temperature, args.top_k, args.top_p)
    except ValueError as err:
        raise UsageError(f"--temperature/--top-k/--top-p: {err}") from None


def _weights(args: argparse.Namespace, cfg: Any, plan: Any) -> tuple[Any, int]:
    """The params placed on the mesh, and the checkpoint bytes this process read for them."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    from inferbook.model.decoder import init_params
    from inferbook.parallel.checkpoint_shards import CheckpointShards
    from inferbook.parallel.sharding import param_specs, shard_params
    dtype = jnp.dtype(args.dtype)
    if args.checkpoint is None:         # the same seed in every process: the same weights
        return shard_params(init_params(cfg, args.seed, dtype), cfg, plan), 0
    shards = CheckpointShards(args.checkpoint)
    shardings = jax.tree.map(lambda s: NamedSharding(plan.mesh, s), param_specs(cfg, plan))
    return shards.load(shardings, dtype), shards.bytes_read


def checked_inputs(args: argparse.Namespace, mesh: Any) -> tuple[Any, Any, Any]:
    """(config, sampler, plan) of the arguments, or the refusal of bad input: run by the
    supervisor on an abstract mesh before any worker starts, and by each worker again."""
    from inferbook.model.checkpoint import read_checkpoint_config
    from inferbook.model.generate_args import check_generate_args
    from inferbook.model.presets import get_preset
    from inferbook.parallel.sharding import make_plan
    cfg = get_preset(args.model) if args.checkpoint is None else \
        read_checkpoint_config(args.checkpoint)
    sampler = _sampler(args)
    try:
        check_generate_args(cfg, args.prompt_ids, args.max_new_tokens, sampler, args.eos_id)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return cfg, sampler, make_plan(cfg, mesh, args.layout or "1d-ws")


def run_process(args: argparse.Namespace) -> int:
    """The worker's whole run (see the module's docstring); returns the exit code."""
    from inferbook.parallel import multihost
    multihost.join(args.job, args.cpu_devices)

    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    from inferbook.parallel.devices import setup
    from inferbook.parallel.mesh import parse_mesh_shape
    from inferbook.parallel.sharded_decode import generate
    setup(args.cpu_devices)          # the device count join asked for; exact float32 products
    mesh = multihost.global_mesh(parse_mesh_shape(args.mesh))
    cfg, sampler, plan = checked_inputs(args, mesh)
    params, read = _weights(args, cfg, plan)
    result = generate(params, cfg, args.prompt_ids, args.max_new_tokens, plan=plan,
                      sampler=sampler, key=jax.random.key(args.seed), eos_id=args.eos_id)
    # What each process holds and read, gathered to every process (process 0 prints it).
    mine = np.array([jax.local_device_count(), multihost.addressable_bytes(params), read],
                    np.int64)
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 3)
    if multihost.is_primary():
        if args.json:
            processes = [{"process": p, "devices": int(d), "weight_bytes_held": int(h),
                          "checkpoint_bytes_read": int(r)} for p, (d, h, r) in enumerate(every)]
            print(json.dumps({"tokens": result.tokens, "processes": processes}))
        else:
            for b, (prompt, new) in enumerate(zip(args.prompt_ids, result.tokens)):
                print(f"prompt {b + 1}: {' '.join(map(str, prompt))} -> "
                      f"{' '.join(map(str, new))}")
    return 0


def main() -> int:
    """Read the arguments from stdin, run, and turn bad input into the one-line error."""
    from inferbook.model.config import ConfigError
    from inferbook.model.safetensors_io import CheckpointError
    from inferbook.parallel.local_job import die_with_parent
    from inferbook.parallel.mesh import MeshError
    from inferbook.parallel.multihost import JobError
    from inferbook.parallel.sharding import LayoutError
    die_with_parent()
    args = pickle.load(sys.stdin.buffer)
    # The output is this process's Python prints alone: libraries that write to the C-level
    # stdout (gloo reports its connections there) are sent to stderr, which the supervisor
    # keeps for a failure's summary.
    output = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = output
    try:
        return run_process(args)
    except (UsageError, ConfigError, CheckpointError, LayoutError, MeshError, JobError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        sys.stderr.write(f"inferbook generate: error: {first}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
