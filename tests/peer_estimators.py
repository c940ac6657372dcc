"""Run two other estimators on published points and record what they predict.

    python -m venv /tmp/peers && /tmp/peers/bin/pip install llm-analysis==0.2.2 genz-llm==0.0.16
    PYTHONPATH=lib /tmp/peers/bin/python tests/peer_estimators.py book/data/peer_estimators.json

The two packages are not the project's dependencies: they run in a throwaway environment, and
their numbers are kept in the data file this writes, beside the versions that made them. The
book's reference page (book/estimate_reference.py) sets them beside `inferbook estimate` and
the measurement on the same cases.

Each case is a published generation rate (book/data/published/): a static batch of B prompts of
P tokens, O tokens generated, on n chips in tensor parallelism. Each tool is asked as its
documentation says, at its own defaults (no efficiency supplied), and its answer turned into
the same rate, B · O over the time of the whole generation:

* llm-analysis: `llm_analysis.analysis.infer(...)["total_latency"]` (its prefill, then O
  decode steps at one context). Its model file must have an MLP width divisible by the
  model width, and describes a gated MLP by the width of an equivalent two-matrix one:
  1.5 · F, rounded down to a multiple of D where 1.5 · F is not one (Mixtral: 20,480 for
  21,504); fp8 is asked as its w8a8 format with a 1-byte cache.
* GenZ: `prefill_moddeling(...).Latency` plus O − 1 times `decode_moddeling(...).Latency`
  at the middle of the generation (the cache at P + O/2), both in milliseconds.

A tool that refuses a case (an error of its own) has `null` there, and its message instead
of the call.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import tempfile
import warnings
from pathlib import Path

from inferbook.model.presets import get_preset
from inferbook.perf.published_points import load_points

CASES = ("gpt-fast/llama-2-7b/a100-80gb/tp1/bf16",
         "gpt-fast/llama-2-70b/a100-80gb/tp8/bf16",
         "gpt-fast/mixtral-8x7b/a100-80gb/tp2/bf16",
         "tensorrt-llm-0.5/llama-2-70b/a100-80gb/tp4/fp16-b64-p128-o128",
         "tensorrt-llm-0.9/llama-2-7b/h100-sxm/tp1/fp8-b120-p128-o2048")
GPUS = {"A100 80GB": ("a100-sxm-80gb", "A100_80GB_GPU"), "H100 SXM": ("h100-sxm-80gb", "H100_GPU")}
GENZ_MODELS = {"llama-2-7b": "llama2_7b", "llama-2-70b": "llama2_70b",
               "mixtral-8x7b": "mixtral_8x7b"}


def llm_analysis_config(preset: str, folder: Path) -> str:
    """A model file llm-analysis reads: its two-matrix MLP width for a gated one."""
    cfg = get_preset(preset)
    ffn = 3 * cfg.F // 2 // cfg.D * cfg.D
    data = {"name": f"inferbook-{preset}", "num_layers": cfg.L, "n_head": cfg.N,
            "hidden_dim": cfg.D, "vocab_size": cfg.V, "max_seq_len": cfg.max_seq_len,
            "num_key_value_heads": cfg.K, "ffn_embed_dim": ffn, "model_type": "llama"}
    if cfg.moe is not None:
        data.update(moe_num_experts=cfg.moe.E, moe_top_k=cfg.moe.k,
                    ffn_embed_dim=3 * cfg.moe.F // 2 // cfg.D * cfg.D)
    path = folder / f"{preset}.json"
    path.write_text(json.dumps(data))
    return str(path)


def llm_analysis_rate(p, folder: Path) -> tuple[float, str]:
    from llm_analysis.analysis import infer
    fp8 = p.compute == "fp8"
    kwargs = dict(model_name=llm_analysis_config(p.model, folder), gpu_name=GPUS[p.chip][0],
                  dtype_name="w8a8e16" if fp8 else "w16a16e16", batch_size_per_gpu=p.batch,
                  seq_len=p.prompt, num_tokens_to_generate=p.output, tp_size=p.tp,
                  log_level="ERROR")
    if fp8:
        kwargs["kv_cache_dtype_bytes"] = 1
    out = infer(**kwargs)
    call = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if k != "model_name")
    return p.batch * p.output / out["total_latency"], f"infer({call})"


def genz_rate(p) -> tuple[float, str]:
    from GenZ import decode_moddeling, prefill_moddeling
    common = dict(model=GENZ_MODELS[p.model], batch_size=p.batch,
                  system_name=GPUS[p.chip][1], bits="fp8" if p.compute == "fp8" else "bf16",
                  tensor_parallel=p.tp)
    prefill = prefill_moddeling(input_tokens=p.prompt, **common)["Latency"]
    step = decode_moddeling(input_tokens=p.prompt, output_tokens=p.output // 2,
                            **common)["Latency"]
    seconds = (prefill + (p.output - 1) * step) / 1000
    call = ", ".join(f"{k}={v!r}" for k, v in common.items())
    return p.batch * p.output / seconds, f"prefill + (O - 1) decode steps, {call}"


def main(out: str) -> int:
    warnings.filterwarnings("ignore")
    points = {p.id: p for p in load_points()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            p = points[case]
            row = {"id": case, "quantity": p.quantity, "measured": p.value}
            for tool, ask in (("llm_analysis", lambda: llm_analysis_rate(p, Path(tmp))),
                              ("genz", lambda: genz_rate(p))):
                try:
                    row[tool], row[f"{tool}_call"] = ask()
                except (ValueError, AssertionError) as refused:   # the tool's own refusal
                    row[tool] = None
                    row[f"{tool}_call"] = "refused: " + " ".join(str(refused).split())
            rows.append(row)
    data = {"source": "Computed, not measured: tests/peer_estimators.py ran llm-analysis and "
                      "GenZ, each in the version below and at its own defaults, on five "
                      "published points (book/data/published/); each row is the measured "
                      "generation rate (output tokens per second) and each tool's prediction "
                      "of it, with the call that gave it, or null and the tool's message where "
                      "it refused the case. The script's docstring says how each tool's "
                      "answer becomes the rate.",
            "versions": {name: importlib.metadata.version(name)
                         for name in ("llm-analysis", "genz-llm")},
            "rows": rows}
    Path(out).write_text(json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: peer_estimators.py OUT.json\n")
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
