"""Inference on many chips (part V, "Many chips": chapters 8-10; experts: 14).

Meshes of emulated CPU devices make sharding exact in shapes, bytes, FLOPs and collectives
(never in speed). Each sharded layout is a `shard_map` whose collectives are written where
the math happens, checked token for token against the unsharded model, and its collectives
read from the compiled program and checked against the layout's inventory. What each layout
sends, and what that costs, is communication, and lives in `inferbook.perf` with every other
cost (`perf.collectives`, `perf.hlo`, `perf.layout_comms`, `perf.comm_time`).

    devices.py            `inferbook.setup()`: the accelerator plus eight CPU devices
    mesh.py               named meshes and a `shard_map` that works on every JAX we support
    sharding.py           sharding plans: which weight and cache axis goes on which mesh axis
    layout_rules.py       what each layout decides, and which models it runs
    layout_steps.py       what each layout computes
    weight_stationary.py  1D and 2D weight-stationary layers
    weight_gathered.py    weight-gathered layers (prefill at large batch)
    kv_sharding.py        the KV cache sharded by heads, batch or position
    sequence_parallel.py  ring attention over a sequence split across devices
    expert_parallel.py    experts split over devices, tokens sent to them by AllToAll
    sharded_decode.py     prefill and generation on a mesh, for every plan

Importing this package starts no JAX.
"""
