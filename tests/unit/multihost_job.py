"""A worker of the multi-process tests: several generations in one job of local processes.

`test_multihost.py` starts this script once per process through `cli.launch.run_workers`
(the supervisor `inferbook generate --processes N` uses), with a pickled payload on stdin:
the job (`multihost.JobSpec`), each process's CPU devices, and the cases to run — a preset
or a checkpoint, a mesh, a layout, prompts. One job runs every case, so the processes start,
join and compile once for all of them. Process 0 prints one JSON line per case: the tokens,
and per process the bytes of weights its devices hold and the checkpoint bytes it read.
"""

import json
import os
import pickle
import sys

from inferbook.parallel.local_job import die_with_parent  # noqa: E402

die_with_parent()
payload = pickle.load(sys.stdin.buffer)
output = os.fdopen(os.dup(1), "w", buffering=1)      # gloo writes to the C-level stdout
os.dup2(2, 1)

from inferbook.parallel import multihost  # noqa: E402

multihost.join(payload["job"], payload["cpu_devices"])

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from inferbook.model.decoder import init_params  # noqa: E402
from inferbook.model.presets import get_preset  # noqa: E402
from inferbook.parallel.checkpoint_shards import CheckpointShards  # noqa: E402
from inferbook.parallel.devices import setup  # noqa: E402
from inferbook.parallel.sharded_decode import generate  # noqa: E402
from inferbook.parallel.sharding import make_plan, param_specs, shard_params  # noqa: E402

setup(payload["cpu_devices"])
for case in payload["cases"]:
    mesh = multihost.global_mesh(case["mesh"])
    read = 0
    if "checkpoint" in case:
        shards = CheckpointShards(case["checkpoint"])
        cfg = shards.cfg
        plan = make_plan(cfg, mesh, case["layout"])
        params = shards.load(jax.tree.map(lambda s: NamedSharding(mesh, s),
                                          param_specs(cfg, plan)), jnp.float32)
        read = shards.bytes_read
    else:
        cfg = get_preset(case["model"])
        plan = make_plan(cfg, mesh, case["layout"])
        params = shard_params(init_params(cfg, case["seed"]), cfg, plan)
    tokens = generate(params, cfg, case["prompts"], case["new"], plan=plan).tokens
    mine = np.array([multihost.addressable_bytes(params), read], np.int64)
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 2)
    if multihost.is_primary():
        output.write(json.dumps({"tokens": tokens, "held": every[:, 0].tolist(),
                                 "read": every[:, 1].tolist()}) + "\n")
