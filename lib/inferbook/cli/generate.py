"""`inferbook generate`: text from a real model, or new tokens from a preset's random weights.

    inferbook generate --model smollm2-135m-instruct --chat \
        --prompt "What is the capital of France?"
    The capital of France is Paris.

The model is a pretrained one (``--model smollm2-135m-instruct``, its weights fetched by
`make`), or ``--checkpoint`` a Hugging Face directory, a .gguf file or ``hf:ORG/NAME`` from
the hub; ``--prompt`` is text, tokenized by the checkpoint's tokenizer and, with ``--chat``,
wrapped in its chat template (``--system`` adds a system prompt). One prompt streams its
answer as it is generated; several print theirs in order when all are done. Generation stops
at the checkpoint's end-of-sequence ids (``--eos-id`` replaces them, ``--ignore-eos`` runs all
``--max-new-tokens``). ``--json`` prints the new tokens and their text with the time to the
first token and the decoding rate, measured after a warm-up run that compiles the programs.

Any other preset runs random weights on token ids:

    inferbook generate --model tiny --seed 0 --prompt-ids 1,2,3 --prompt-ids 4,5 \
        --max-new-tokens 8 --json

With --mesh the same tokens come from a model sharded over a device mesh (emulated CPU
devices when there are not enough accelerators; the command sets them up itself):

    inferbook generate --model tiny --prompt-ids 1,2,3 --mesh 2x4 --layout 2d-ws --json

and from a multi-process JAX job over that mesh, as on the hosts of a pod (`cli.launch`):

    inferbook generate --model tiny --prompt-ids 1,2,3 --mesh 2x2 --layout 2d-ws --processes 2
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.model.model_store import PRETRAINED
from inferbook.model.presets import get_preset
from inferbook.parallel.devices import DeviceSetupError, setup
from inferbook.parallel.mesh import MeshError, named_mesh, parse_mesh_shape
from inferbook.perf import counts

from . import UsageError, launch
from . import args as types
from .resources import require_memory

# What loads JAX (sampling, the model, the sharded layouts) is imported inside the functions
# that need it, once the arguments have been checked: a refusal never waits for JAX.

__all__ = ["add_parser", "run", "parse_ids", "SEED_MAX", "check_against_model", "check_memory",
           "mesh_for", "sharded_generate_cli"]

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


def checkpoint_spec(text: str) -> str:
    """An argparse type: a checkpoint named on the command line (resolved when it runs)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty checkpoint name")
    return text


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("generate", help="generate text (or tokens) with the KV-cached "
                              "decoder", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="DIR|FILE.gguf|hf:ORG/NAME", type=checkpoint_spec,
                     help="a Hugging Face checkpoint directory, a GGUF file, or a hub model")
    src.add_argument("--model", metavar="PRESET",
                     help=f"a preset: {', '.join(PRETRAINED)} loads its trained weights, any "
                          "other gets random ones (see --seed)")
    p.add_argument("--seed", type=types.integer(0, SEED_MAX), default=0,
                   help="seed of the random weights (with --model) and of sampling (default 0)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", action="append", metavar="TEXT",
                      help="a prompt as text (needs the checkpoint's tokenizer); repeat for a "
                           "batch of prompts")
    what.add_argument("--prompt-ids", action="append", metavar="IDS", type=parse_ids,
                      help="comma-separated token ids; repeat for a batch of prompts")
    p.add_argument("--chat", action="store_true",
                   help="send each --prompt as a user turn through the chat template")
    p.add_argument("--system", metavar="TEXT", help="with --chat: a system prompt")
    p.add_argument("--max-new-tokens", type=types.positive_int(), default=16, metavar="N")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--greedy", action="store_true", help="argmax decoding (the default)")
    how.add_argument("--temperature", type=types.finite_float(0.0, above=True), metavar="T")
    p.add_argument("--top-k", type=types.positive_int(), metavar="K")
    p.add_argument("--top-p", type=types.probability, metavar="P")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--eos-id", type=types.nonnegative_int(), metavar="ID",
                      help="stop a sequence at this token (default: the checkpoint's "
                           "end-of-sequence ids)")
    stop.add_argument("--ignore-eos", action="store_true",
                      help="never stop early: every prompt gets --max-new-tokens (to measure)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--keep-quantized", action="store_true",
                   help="a GGUF checkpoint's quantized matrices stay in their blocks, decoded "
                        "inside every step (default: dequantized to --dtype when loaded)")
    p.add_argument("--json", action="store_true",
                   help='print {"tokens": [[...], ...], "text": [...]} and the timings')
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


def check_against_model(args: argparse.Namespace, cfg: ModelConfig,
                        prompts: list[list[int]]) -> None:
    """What only the model can tell: the vocabulary and the positions."""
    for b, prompt in enumerate(prompts):
        if not prompt:
            raise UsageError(f"prompt {b + 1} is empty: it gives no tokens to start from")
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


def check_memory(args: argparse.Namespace, cfg: ModelConfig, prompts: list[list[int]],
                 mesh: Any) -> None:
    """Weights plus the KV cache `decode.generate` allocates (prompt padded to 16 tokens,
    plus the new ones), against the memory where they will live."""
    itemsize = {"float32": 4, "bfloat16": 2}[args.dtype]
    T = -(-max(len(p) for p in prompts) // 16) * 16
    needed = (counts.param_count(cfg) * itemsize
              + counts.kv_cache_bytes(cfg, len(prompts), T + args.max_new_tokens, itemsize))
    devices = 1 if mesh is None or mesh.devices.flat[0].platform == "cpu" else mesh.devices.size
    require_memory(needed / devices, f"{cfg.name} ({args.dtype}) with a cache for "
                   f"{len(prompts)} x {T + args.max_new_tokens} tokens")


def _check_text_flags(args: argparse.Namespace) -> None:
    if args.system is not None and not args.chat:
        raise UsageError("--system needs --chat (the system prompt goes through the chat "
                         "template)")
    if args.chat and args.prompt is None:
        raise UsageError("--chat needs --prompt TEXT (token ids are not a conversation)")
    if args.keep_quantized and args.checkpoint is None and args.model not in PRETRAINED:
        raise UsageError("--keep-quantized needs a GGUF checkpoint")


def _check_job_flags(args: argparse.Namespace) -> None:
    """A multi-process job (`cli.launch`) runs token ids on a preset's random weights or a
    safetensors checkpoint directory, read block by block; text and the pretrained models'
    other formats run in one process."""
    text = [flag for flag, given in (("--prompt", args.prompt is not None),
                                     ("--chat", args.chat),
                                     ("--keep-quantized", args.keep_quantized),
                                     (f"--model {args.model}", args.model in PRETRAINED))
            if given]
    if args.checkpoint is not None and not Path(args.checkpoint).is_dir():
        text.append(f"--checkpoint {args.checkpoint} (not a directory)")
    if text:
        raise UsageError(f"--processes/--coordinator run --prompt-ids on a preset or a "
                         f"safetensors checkpoint directory; {', '.join(text)} runs in one "
                         "process")


def run(args: argparse.Namespace) -> int:
    sampler = _sampler(args)
    _check_text_flags(args)
    if launch.requested(args):       # a multi-process JAX job: cli.launch supervises it
        _check_job_flags(args)
        return launch.run(args)
    if args.checkpoint is not None or args.model in PRETRAINED:
        from .generate_text import run_pretrained
        return run_pretrained(args, sampler)
    if args.prompt is not None:
        raise UsageError(f"--prompt needs a model with a tokenizer: --checkpoint, or --model "
                         f"{' / '.join(PRETRAINED)}; {args.model} takes --prompt-ids")
    cfg = get_preset(args.model)
    prompts = args.prompt_ids
    check_against_model(args, cfg, prompts)
    mesh = mesh_for(args)
    check_memory(args, cfg, prompts, mesh)

    import jax.numpy as jnp

    from inferbook.model.decoder import init_params

    from .generate_text import generate_tokens, report
    params = init_params(cfg, args.seed, jnp.dtype(args.dtype))
    eos = () if args.eos_id is None else (args.eos_id,)
    if mesh is not None:
        result = sharded_generate_cli(args, mesh, params, cfg, prompts, sampler, eos)
        timing = None
    else:
        result, timing = generate_tokens(args, params, cfg, prompts, sampler, eos)
    report(args, prompts, result.tokens, None, timing)
    return 0


# --mesh / --layout ---------------------------------------------------------------------------

CLI_CPU_DEVICES = 8     # the emulated devices the command provides (the book's standard)


def mesh_for(args: argparse.Namespace) -> Any:
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


def sharded_generate_cli(args: argparse.Namespace, mesh: Any, params: Any, cfg: ModelConfig,
                         prompts: list[list[int]], sampler: Any, eos: tuple[int, ...]) -> Any:
    """`parallel.sharded_decode.generate` over `mesh` in the layout --layout names."""
    import jax

    from inferbook.parallel.sharded_decode import generate as sharded_generate
    from inferbook.parallel.sharding import LayoutError, make_plan
    layout = args.layout or "1d-ws"
    try:
        plan = make_plan(cfg, mesh, layout)
    except LayoutError as err:
        raise UsageError(str(err)) from None
    if len(eos) > 1:
        raise UsageError("--mesh stops at one end-of-sequence id; give it with --eos-id")
    return sharded_generate(params, cfg, prompts, args.max_new_tokens, plan=plan,
                            sampler=sampler, key=jax.random.key(args.seed),
                            eos_id=eos[0] if eos else None)
