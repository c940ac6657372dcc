"""`inferbook generate`: new tokens from a checkpoint or a preset with random weights.

    inferbook generate --model tiny --seed 0 --prompt-ids 1,2,3 --prompt-ids 4,5 \
        --max-new-tokens 8 --json
    {"tokens": [[...8 ids...], [...8 ids...]]}

With --mesh the same tokens come from a model sharded over a device mesh (emulated CPU
devices when there are not enough accelerators; the command sets them up itself):

    inferbook generate --model tiny --prompt-ids 1,2,3 --mesh 2x4 --layout 2d-ws --json

and from a multi-process JAX job over that mesh, as on the hosts of a pod (`cli.launch`):

    inferbook generate --model tiny --prompt-ids 1,2,3 --mesh 2x2 --layout 2d-ws --processes 2
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from inferbook.model.hf_config import from_hf_config, read_hf_config
from inferbook.model.presets import get_preset
from inferbook.parallel.devices import DeviceSetupError, setup
from inferbook.parallel.mesh import MeshError, named_mesh, parse_mesh_shape
from inferbook.perf import counts

from . import UsageError, launch
from . import args as types
from .resources import require_memory

# What loads JAX (sampling, the model, the sharded layouts) is imported inside the functions
# that need it, once the arguments have been checked: a refusal never waits for JAX.

__all__ = ["add_parser", "run", "parse_ids", "SEED_MAX"]

# Sampling keys are 32-bit: jax.random.key(2**32 + s) is jax.random.key(s), so a larger seed
# would only pretend to differ (and a negative one is refused by numpy's weight init).
SEED_MAX = 2**32 - 1
MAX_PROMPT_TOKENS = 1 << 20     # more ids than any model here has positions, parsed no further
# The layouts of inferbook.parallel.layout_rules.LAYOUTS, named here because reading that table
# would start JAX before the arguments are checked (a test keeps the two the same).
MESH_LAYOUTS = ("1d-ws", "2d-ws", "weight-gathered", "expert-parallel")


def parse_ids(text: str) -> list[int]:
    """'1,2,3' -> [1, 2, 3]: an argparse type (ASCII digits only; the vocabulary is checked
    once the model is known)."""
    parts = text.split(",")
    if len(parts) > MAX_PROMPT_TOKENS:
        raise argparse.ArgumentTypeError(f"more than {MAX_PROMPT_TOKENS} token ids")
    if not text.strip() or not all(re.fullmatch(r"\s*-?[0-9]{1,30}\s*", p) for p in parts):
        shown = text if len(text) <= 60 else text[:60] + "..."
        raise argparse.ArgumentTypeError(f"{shown!r} is not a comma-separated list of integers")
    return [int(p) for p in parts]


def mesh_shape(text: str) -> str:
    """An argparse type: '8', '2x4' or '2x2x2' in ASCII digits (checked again by
    `parallel.mesh.parse_mesh_shape`, which also knows the axes)."""
    if not re.fullmatch(r"\s*[1-9][0-9]{0,5}(\s*[x×]\s*[1-9][0-9]{0,5})*\s*", text):
        raise argparse.ArgumentTypeError(f"mesh shape {text!r} is not of the form 8, 2x4 "
                                         "or 2x2x2")
    return text


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("generate", help="generate tokens with the KV-cached decoder",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="DIR", type=types.existing_dir,
                     help="Hugging Face Llama-family checkpoint")
    src.add_argument("--model", metavar="PRESET", help="a preset with random weights (see --seed)")
    p.add_argument("--seed", type=types.integer(0, SEED_MAX), default=0,
                   help="seed of the random weights (with --model) and of sampling (default 0)")
    p.add_argument("--prompt-ids", action="append", required=True, metavar="IDS", type=parse_ids,
                   help="comma-separated token ids; repeat for a batch of prompts")
    p.add_argument("--max-new-tokens", type=types.positive_int(), default=16, metavar="N")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--greedy", action="store_true", help="argmax decoding (the default)")
    how.add_argument("--temperature", type=types.finite_float(0.0, above=True), metavar="T")
    p.add_argument("--top-k", type=types.positive_int(), metavar="K")
    p.add_argument("--top-p", type=types.probability, metavar="P")
    p.add_argument("--eos-id", type=types.nonnegative_int(), metavar="ID",
                   help="stop a sequence at this token")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--json", action="store_true", help='print {"tokens": [[...], ...]}')
    p.add_argument("--mesh", metavar="SHAPE", type=mesh_shape,
                   help="shard over a device mesh, e.g. 8, 2x4 or 2x2x2 (default: one device)")
    p.add_argument("--layout", choices=MESH_LAYOUTS,
                   help="with --mesh: 1D or 2D weight-stationary, weight-gathered, or (a "
                        "mixture of experts) expert-parallel sharding (default 1d-ws)")
    launch.add_job_arguments(p)      # --processes N | --coordinator HOST:PORT ... (cli.launch)
    p.set_defaults(run=run)


def _sampler(args):
    from inferbook.model.sampling import GREEDY, Sampler  # loads JAX (not started)
    if args.temperature is None:
        if args.top_k is not None or args.top_p is not None:
            raise UsageError("--top-k and --top-p need --temperature")
        return GREEDY
    try:                        # Sampler is where the limits of each setting are defined
        return Sampler(args.temperature, args.top_k, args.top_p)
    except ValueError as err:
        raise UsageError(f"--temperature/--top-k/--top-p: {err}") from None


def _config(args):
    """The model's config, read without building or loading any weights."""
    if args.model is not None:
        return get_preset(args.model)
    return from_hf_config(read_hf_config(args.checkpoint), name=Path(args.checkpoint).name)


def _check_against_model(args, cfg, prompts) -> None:
    """What only the model can tell: the vocabulary and the positions."""
    for b, prompt in enumerate(prompts):
        bad = [t for t in prompt if not 0 <= t < cfg.V]
        if bad:
            raise UsageError(f"prompt {b + 1} has token ids outside the vocabulary "
                             f"[0, {cfg.V}): {', '.join(map(str, bad[:5]))}")
    if args.eos_id is not None and args.eos_id >= cfg.V:
        raise UsageError(f"--eos-id {args.eos_id} is outside the vocabulary [0, {cfg.V})")
    longest, limit = max(len(p) for p in prompts), cfg.position_limit
    if limit is not None and longest + args.max_new_tokens > limit:
        raise UsageError(f"a prompt of {longest} tokens plus --max-new-tokens "
                         f"{args.max_new_tokens} needs {longest + args.max_new_tokens} "
                         f"positions; {cfg.name} has {limit}")


def _check_memory(args, cfg, prompts, mesh) -> None:
    """Weights plus the KV cache `decode.generate` allocates (prompt padded to 16 tokens,
    plus the new ones), against the memory where they will live."""
    itemsize = {"float32": 4, "bfloat16": 2}[args.dtype]
    T = -(-max(len(p) for p in prompts) // 16) * 16
    needed = (counts.param_count(cfg) * itemsize
              + counts.kv_cache_bytes(cfg, len(prompts), T + args.max_new_tokens, itemsize))
    devices = 1 if mesh is None or mesh.devices.flat[0].platform == "cpu" else mesh.devices.size
    require_memory(needed / devices, f"{cfg.name} ({args.dtype}) with a cache for "
                   f"{len(prompts)} x {T + args.max_new_tokens} tokens")


def run(args: argparse.Namespace) -> int:
    if launch.requested(args):       # a multi-process JAX job: cli.launch supervises it
        return launch.run(args)
    prompts = args.prompt_ids
    sampler = _sampler(args)
    cfg = _config(args)
    _check_against_model(args, cfg, prompts)
    mesh = _mesh(args)
    _check_memory(args, cfg, prompts, mesh)

    import jax
    import jax.numpy as jnp

    from inferbook.model.checkpoint import load_checkpoint
    from inferbook.model.decode import generate
    from inferbook.model.decoder import init_params
    dtype = jnp.dtype(args.dtype)
    if args.checkpoint is not None:
        cfg, params = load_checkpoint(args.checkpoint, dtype=dtype)
    else:
        params = init_params(cfg, args.seed, dtype)
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
