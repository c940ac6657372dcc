"""What moves the decode step on this device: each lever, measured before and after.

A decode step at batch 1 is a read of the weights (chapter 1), so anything that makes the
read faster — or that stops the step from reading at full speed — shows up in its time.
`measure_levers` times the library's step (`timing.decode_step_timer`, batch 1, the benchmark
model) with and without each lever, in alternation, and `inferbook bench --levers --save`
keeps the result as a data file (`book/data/decode_levers/`) that chapter 2 tabulates for
each JAX version:

* in one process, the two variants timed in alternation — the weight layouts of
  `model.decode_layout` (fused projections, then [out, in] matrices), the new keys and
  values written in the same program as the step (its cache donated), bfloat16 weights
  widened inside each product;
* in child processes, alternating with a child that runs the default — what only holds for
  a whole process: one core instead of all, JAX's synchronous dispatch on a CPU, an XLA flag.

Each lever's "before" is the step as the library ran it just before that lever; the
layouts chain (weights → fused → decode layout) and every later lever starts from the
decode layout; one lever repeats the layout change at batch 8, where the products are
matrix–matrix ones. Each lever's pair is timed on its own; times are medians over rounds
after a warm-up, the device named.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from inferbook import __version__
from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.decode_layout import to_decode_layout
from inferbook.model.decoder import init_params
from inferbook.model.sampling import GREEDY
from inferbook.perf import timing

__all__ = ["IN_PROCESS", "CHILD_LEVERS", "step_and_append", "one_program_stepper",
           "measure_levers", "child_step"]

BATCH, CONTEXT = 1, 128
# name -> (the variant before, the variant after): variants are built by `_steppers`; "@8"
# runs the step at batch 8 instead of 1.
IN_PROCESS = {"fused projections": ("weights", "fused"),
              "matrices stored [out, in]": ("fused", "decode"),
              "the decode layout at batch 8": ("weights@8", "decode@8"),
              "the append in the step's program": ("decode", "one program"),
              "bfloat16 weights, widened in the product": ("decode", "bfloat16")}
# name -> what the child process changes: environment variables for the child.
CHILD_LEVERS = {"one core instead of all": {"INFERBOOK_LEVER_CORES": "1"},
                "synchronous dispatch": {"INFERBOOK_LEVER_SYNC": "1"},
                "XNNPACK for the products (XLA flag)": {
                    "XLA_FLAGS": "--xla_cpu_experimental_xnn_fusion_type=dot"}}


@partial(jax.jit, static_argnames=("cfg",), donate_argnames=("cache",))
def step_and_append(params: Any, cfg: ModelConfig, tok_B: jax.Array, done_B: jax.Array,
                    cache: kvcache.KVCache, key: jax.Array) -> tuple[jax.Array, Any]:
    """`decode.next_token` and the cache append in one program, the cache donated (greedy)."""
    tok_B, _, _, (new_k, new_v) = decode.next_token(params, cfg, tok_B, done_B, cache, key,
                                                    GREEDY, -1)
    return tok_B, kvcache.append(cache, new_k, new_v)


def one_program_stepper(params: Any, cfg: ModelConfig, batch: int,
                        context: int) -> Callable[[], Any]:
    """Like `timing.decode_step_timer`, but the new keys and values are written in the step's
    own program, the cache donated to it — one dispatch instead of two. XLA:CPU then copies
    every layer's cache each step (the program reads the cache and writes it), which is why
    `decode.generate` appends in a program of its own."""
    lengths = np.full((batch,), context, np.int32)
    state = {"cache": kvcache.init_cache(cfg, batch, context + 1, params["embed"].dtype),
             "tok": jnp.zeros((batch,), jnp.int32)}
    done, key = jnp.zeros((batch,), bool), jax.random.key(0)

    def step():
        tok, cache = step_and_append(params, cfg, state["tok"], done,
                                     state["cache"]._replace(lengths=jnp.asarray(lengths)),
                                     key)
        state["tok"], state["cache"] = tok, cache
        return tok
    return step


def _steppers(variants: list[str], params: Any, cfg: ModelConfig) -> list[Callable[[], Any]]:
    """The decode step at batch 1 for each variant of the library's (each layout built once)."""
    layouts = {"weights": lambda: params,
               "fused": lambda: to_decode_layout(params, cfg, transpose=False),
               "decode": lambda: to_decode_layout(params, cfg),
               "bfloat16": lambda: to_decode_layout(params, cfg, dtype=jnp.bfloat16)}
    built = {}

    def weights(name: str) -> Any:
        if name not in built:
            built[name] = layouts[name]()
        return built[name]
    def stepper(variant: str) -> Callable[[], Any]:
        if variant == "one program":
            return one_program_stepper(weights("decode"), cfg, BATCH, CONTEXT)
        layout, _, batch = variant.partition("@")
        return timing.decode_step_timer(weights(layout), cfg, int(batch or BATCH), CONTEXT + 1,
                                        filled=CONTEXT)
    return [stepper(v) for v in variants]


def child_step(model: str, rounds: int) -> dict[str, Any]:
    """In a child process: the decode-layout step's median over `rounds`, as JSON-ready."""
    from inferbook.model.presets import get_preset
    cfg = get_preset(model)
    (step,) = _steppers(["decode"], init_params(cfg, 0), cfg)
    t = timing.time_fn(step, repeats=rounds, warmup=2)
    return {"median_s": t.median_s, "cores": len(os.sched_getaffinity(0)),
            "jax_version": jax.__version__}


def _run_child(model: str, rounds: int, env: dict[str, str]) -> float:
    code = ("import inferbook.perf.decode_levers as d, json, sys; "
            f"print(json.dumps(d.child_step({model!r}, {rounds})))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["median_s"]


def measure_levers(cfg: ModelConfig, rounds: int = 15, child_rounds: int = 3,
                   children: bool = True, show_progress: bool = True,
                   note: str = "") -> dict[str, Any]:
    """Every lever of `IN_PROCESS` (and, with `children`, of `CHILD_LEVERS`) on `cfg` at batch
    1 with a 128-token cache: the step's median before and after, on this device.

    An in-process lever's two variants run in alternation with each other alone, `rounds`
    timed rounds after two warm-up rounds (a variant that allocates much, like XLA widening
    every bfloat16 weight before the product, would slow whatever ran after it); a child
    lever alternates `child_rounds` times with a default child (each child times its step
    `rounds` times) and takes the median of each side's medians.
    """
    params = init_params(cfg, 0)
    levers = []
    for name, (before, after) in IN_PROCESS.items():
        t_before, t_after = timing.time_alternating(
            _steppers([before, after], params, cfg), rounds, warmup=2)
        levers.append(dict(lever=name, before=before, after=after, kind="in process",
                           before_s=t_before.median_s, after_s=t_after.median_s))
    todo = CHILD_LEVERS.items() if children else ()
    if show_progress:
        todo = timing.progress(list(todo), desc="levers in child processes")
    for name, env in todo:
        before, after = [], []
        for _ in range(child_rounds):
            before.append(_run_child(cfg.name, rounds, {}))
            after.append(_run_child(cfg.name, rounds, env))
        levers.append(dict(lever=name, before="decode", after=name, kind="child process",
                           env=env, before_s=statistics.median(before),
                           after_s=statistics.median(after)))
    for lever in levers:
        lever["change"] = lever["after_s"] / lever["before_s"] - 1
    return dict(source="inferbook bench --levers", device=timing.device_name(),
                platform=jax.devices()[0].platform, model=cfg.name, batch=BATCH,
                context=CONTEXT, rounds=rounds, cpu_count=os.cpu_count(),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                jax_version=jax.__version__, inferbook_version=__version__,
                load_average_before=[round(x, 2) for x in os.getloadavg()], note=note,
                levers=levers)


def _apply_child_environment() -> None:
    """What a child lever asks of its process, before JAX starts a backend."""
    if os.environ.get("INFERBOOK_LEVER_CORES"):
        cores = sorted(os.sched_getaffinity(0))[:int(os.environ["INFERBOOK_LEVER_CORES"])]
        os.sched_setaffinity(0, cores)
    if os.environ.get("INFERBOOK_LEVER_SYNC"):
        jax.config.update("jax_cpu_enable_async_dispatch", False)


_apply_child_environment()
