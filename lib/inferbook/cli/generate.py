"""`inferbook generate`: new tokens from a checkpoint or a preset with random weights.

    inferbook generate --model tiny --seed 0 --prompt-ids 1,2,3 --prompt-ids 4,5 \
        --max-new-tokens 8 --json
    {"tokens": [[...8 ids...], [...8 ids...]]}

With --mesh the same tokens come from a model sharded over a device mesh (emulated CPU
devices when there are not enough accelerators; the command sets them up itself):

    inferbook generate --model tiny --prompt-ids 1,2,3 --mesh 2x4 --layout 2d-ws --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import UsageError

__all__ = ["add_parser", "run", "parse_ids"]


def parse_ids(text: str) -> list[int]:
    """'1,2,3' -> [1, 2, 3]; anything else is a UsageError."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p.lstrip("-").isdigit() for p in parts):
        raise UsageError(f"--prompt-ids {text!r} is not a comma-separated list of integers")
    return [int(p) for p in parts]


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("generate", help="generate tokens with the KV-cached decoder",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="DIR", help="Hugging Face Llama-family checkpoint")
    src.add_argument("--model", metavar="PRESET", help="a preset with random weights (see --seed)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random weights (with --model) and of sampling (default 0)")
    p.add_argument("--prompt-ids", action="append", required=True, metavar="IDS",
                   help="comma-separated token ids; repeat for a batch of prompts")
    p.add_argument("--max-new-tokens", type=int, default=16, metavar="N")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--greedy", action="store_true", help="argmax decoding (the default)")
    how.add_argument("--temperature", type=float, metavar="T")
    p.add_argument("--top-k", type=int, metavar="K")
    p.add_argument("--top-p", type=float, metavar="P")
    p.add_argument("--eos-id", type=int, metavar="ID", help="stop a sequence at this token")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--json", action="store_true", help='print {"tokens": [[...], ...]}')
    p.add_argument("--mesh", metavar="SHAPE",
                   help="shard over a device mesh, e.g. 8, 2x4 or 2x2x2 (default: one device)")
    p.add_argument("--layout", choices=("1d-ws", "2d-ws"),
                   help="with --mesh: 1D or 2D weight-stationary sharding (default 1d-ws)")
    p.set_defaults(run=run)


def _sampler(args):
    from inferbook.model.sampling import GREEDY, Sampler
    if args.temperature is None:
        if args.top_k is not None or args.top_p is not None:
            raise UsageError("--top-k and --top-p need --temperature")
        return GREEDY
    if args.temperature <= 0:
        raise UsageError(f"--temperature must be positive, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {args.top_p}")
    return Sampler(args.temperature, args.top_k, args.top_p)


def run(args: argparse.Namespace) -> int:
    prompts = [parse_ids(text) for text in args.prompt_ids]
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be positive, got {args.max_new_tokens}")
    sampler = _sampler(args)
    if args.checkpoint is not None and not Path(args.checkpoint).is_dir():
        raise UsageError(f"checkpoint directory {args.checkpoint} does not exist")
    mesh = _mesh(args)

    from inferbook.model.presets import get_preset
    cfg = get_preset(args.model) if args.model else None
    import jax
    import jax.numpy as jnp

    from inferbook.model.checkpoint import load_checkpoint
    from inferbook.model.decode import generate
    from inferbook.model.decoder import init_params
    dtype = jnp.dtype(args.dtype)
    if cfg is None:
        cfg, params = load_checkpoint(args.checkpoint, dtype=dtype)
    else:
        params = init_params(cfg, args.seed, dtype)
    for b, prompt in enumerate(prompts):
        bad = [t for t in prompt if not 0 <= t < cfg.V]
        if bad:
            raise UsageError(f"prompt {b + 1} has token ids outside the vocabulary "
                             f"[0, {cfg.V}): {', '.join(map(str, bad[:5]))}")
    if mesh is not None:
        result = _sharded_generate(args, mesh, params, cfg, prompts, sampler)
    else:
        result = generate(params, cfg, prompts, args.max_new_tokens, sampler=sampler,
                          key=jax.random.key(args.seed), eos_id=args.eos_id)
    if args.json:
        print(json.dumps({"tokens": result.tokens}))
    else:
        for b, (prompt, new) in enumerate(zip(prompts, result.tokens)):
            print(f"prompt {b + 1}: {' '.join(map(str, prompt))} -> {' '.join(map(str, new))}")
    return 0


# --mesh / --layout ---------------------------------------------------------------------------

CLI_CPU_DEVICES = 8     # the emulated devices the command provides (the book's standard)


def _mesh(args: argparse.Namespace):
    """The device mesh asked for, built before anything else starts JAX; None without --mesh."""
    if args.mesh is None:
        if args.layout is not None:
            raise UsageError("--layout needs --mesh")
        return None
    from inferbook.parallel.devices import DeviceSetupError, setup
    from inferbook.parallel.mesh import MeshError, named_mesh, parse_mesh_shape
    try:
        shape = parse_mesh_shape(args.mesh)
        setup(CLI_CPU_DEVICES)
        return named_mesh(shape)
    except (MeshError, DeviceSetupError) as err:
        raise UsageError(f"--mesh {args.mesh}: {err}") from None


def _sharded_generate(args, mesh, params, cfg, prompts, sampler):
    import jax

    from inferbook.parallel.sharded_decode import generate as sharded_generate
    from inferbook.parallel.sharding import LayoutError, make_plan
    layout = args.layout or "1d-ws"
    try:
        plan = make_plan(cfg, mesh, layout)
    except LayoutError as err:
        raise UsageError(str(err)) from None
    return sharded_generate(params, cfg, prompts, args.max_new_tokens, plan=plan,
                            sampler=sampler, key=jax.random.key(args.seed), eos_id=args.eos_id)
