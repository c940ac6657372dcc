"""`inferbook generate` on a real checkpoint: text in, text out, and what it all takes.

`run_pretrained` is the command for ``--checkpoint`` and the pretrained presets: it opens the
checkpoint without its weights (`model.pretrained.open_pretrained`), turns each ``--prompt``
into token ids (through the chat template with ``--chat``), checks them against the model —
vocabulary, positions, memory — and only then loads the weights and generates.

`generate_tokens` runs the single-device loop for every kind of model. Without ``--json`` one
prompt's text is written to the terminal token by token as it is generated. With ``--json``
the loop runs twice: once to compile its programs (stopped after the first decode step: a
shorter run would compile other shapes), then for real, timed at every token — the time to
the first token (prefill and its sample) and the decode steps' rate, on the device named
beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

from . import UsageError
from .generate import check_against_model, check_memory, mesh_for, sharded_generate_cli

__all__ = ["run_pretrained", "generate_tokens", "report", "eos_for"]


def eos_for(args: argparse.Namespace, declared: tuple[int, ...]) -> tuple[int, ...]:
    """Where generation stops: --eos-id, nowhere (--ignore-eos), or the checkpoint's ids."""
    if args.ignore_eos:
        return ()
    return (args.eos_id,) if args.eos_id is not None else tuple(declared)


def _prompts(args: argparse.Namespace, spec: Any) -> list[list[int]]:
    from inferbook.model.chat import ChatTemplateError
    if args.prompt is None:
        return args.prompt_ids
    try:
        return [spec.prompt(p, chat=args.chat, system=args.system) for p in args.prompt]
    except ChatTemplateError as err:
        raise UsageError(str(err)) from None


def run_pretrained(args: argparse.Namespace, sampler: Any) -> int:
    """Generate from a checkpoint (directory, GGUF file, hub model) or a pretrained preset."""
    from inferbook.model.pretrained import open_pretrained
    mesh = mesh_for(args)                       # before anything starts JAX
    spec = open_pretrained(args.checkpoint if args.checkpoint is not None else args.model)
    prompts = _prompts(args, spec)
    eos = eos_for(args, spec.eos_ids)
    check_against_model(args, spec.cfg, prompts)
    check_memory(args, spec.cfg, prompts, mesh)

    import jax.numpy as jnp
    model = spec.load(jnp.dtype(args.dtype), args.keep_quantized)
    if mesh is not None:
        if args.keep_quantized:
            raise UsageError("--keep-quantized runs on one device; leave out --mesh")
        result = sharded_generate_cli(args, mesh, model.params, model.cfg, prompts, sampler, eos)
        tokens, timing, streamed = result.tokens, None, False
    else:
        streamed = (args.prompt is not None and len(prompts) == 1 and not args.json
                    and model.tokenizer is not None)
        result, timing = generate_tokens(args, model.params, model.cfg, prompts, sampler, eos,
                                         model.tokenizer if streamed else None)
        tokens = result.tokens
    texts = [model.decode(t) for t in tokens] if model.tokenizer is not None else None
    report(args, prompts, tokens, texts, timing, streamed)
    return 0


def _streamer(tokenizer: Any, eos: tuple[int, ...]
              ) -> tuple[Callable[[int, Any], None], Callable[[], None]]:
    """An `on_step` that writes one sequence's new text to stdout as each token arrives, and
    what writes the rest (an unfinished character) at the end."""
    stream, done = tokenizer.stream(), [False]

    def on_step(step: int, tokens_B: Any) -> None:
        token = int(tokens_B[0])
        if not done[0]:
            piece = stream.push([token])
            if piece:
                sys.stdout.write(piece)
                sys.stdout.flush()
        done[0] = done[0] or token in eos
    return on_step, lambda: sys.stdout.write(stream.flush())


def generate_tokens(args: argparse.Namespace, params: Any, cfg: Any, prompts: list[list[int]],
                    sampler: Any, eos: tuple[int, ...], stream_tokenizer: Any = None
                    ) -> tuple[Any, dict[str, Any] | None]:
    """`decode.generate` on one device: the result, and (with --json) its timings."""
    import jax

    from inferbook.model import decode
    key = jax.random.key(args.seed)

    def run(on_step):
        return decode.generate(params, cfg, prompts, args.max_new_tokens, sampler=sampler,
                               key=key, eos_id=eos or None, on_step=on_step)
    if not args.json:
        if stream_tokenizer is None:
            return run(None), None
        on_step, flush = _streamer(stream_tokenizer, eos)
        result = run(on_step)
        flush()
        return result, None
    start = time.perf_counter()
    run(lambda step, tokens: step >= 1)         # compile prefill, the step and the append
    warmup = time.perf_counter() - start
    times: list[float] = []
    start = time.perf_counter()
    result = run(lambda step, tokens: times.append(time.perf_counter()))
    later = sum(max(len(t) - 1, 0) for t in result.tokens)
    decode_s = times[-1] - times[0]
    device = jax.devices()[0]
    return result, {"ttft_s": times[0] - start,
                    "tokens_per_s": later / decode_s if later and decode_s > 0 else None,
                    "decode_s": decode_s, "warmup_s": warmup,
                    "device": f"{device.platform}: {device.device_kind}"}


def report(args: argparse.Namespace, prompts: list[list[int]], tokens: list[list[int]],
           texts: list[str] | None, timing: dict[str, Any] | None, streamed: bool = False
           ) -> None:
    """Print what was generated: JSON, the streamed text's last line, or each answer."""
    if args.json:
        out: dict[str, Any] = {"tokens": tokens}
        if texts is not None:
            out["text"] = texts
        print(json.dumps(out | (timing or {})))
    elif streamed:
        print()
    elif args.prompt is not None and texts is not None:
        for b, (prompt, text) in enumerate(zip(args.prompt, texts)):
            print(f"[{b + 1}] {prompt}\n{text}\n")
    else:
        for b, (prompt, new) in enumerate(zip(prompts, tokens)):
            print(f"prompt {b + 1}: {' '.join(map(str, prompt))} -> {' '.join(map(str, new))}")
