"""Published measurements of LLM serving, one cited point at a time, and what each needs.

The estimator is checked against numbers other people measured on hardware the book cannot
borrow: gpt-fast's README tables, lmdeploy's and TensorRT-LLM's benchmark pages, the JAX
teams' TPU tables. Each lives in a JSON file under `book/data/published/` (listed by its
`index.json`) with the source's URL and version or commit, and each point says, as the source
does, what ran — chip and chip count, software, model (a preset of the library), batch,
prompt and output lengths, precision, parallelism — and what was measured:

    decode_tokens_per_s_per_sequence   one sequence's tokens per second in steady decoding,
                                       every sequence of `batch` holding `context` tokens
    output_tokens_per_s                the whole deployment's generated tokens per second over
                                       a static batch: batch · output / (prefill + output − 1
                                       decode steps)
    output_tokens_per_s_per_chip       the same, divided by the chips
    ttft_ms                            time to the first token, in milliseconds as the
                                       sources print it: the prefill of `batch` prompts of
                                       `prompt` tokens

`layout`, where the source says how it split the model, is the estimator's name for that
layout (`layout_comms.ESTIMATE_LAYOUTS`): the point is predicted in the layout that ran, not the
one the estimator would pick. Without it a tensor-parallel replica is the 1D layout and a
mixture of experts split over its chips is left to the estimator.

`figure` is the number exactly as printed and `value` the same number read; `needs` names,
from `NEEDS`, what the estimator lacks to predict the point well; `split` says whether a
calibration may fit on the point or must leave it out, decided by `split_of(id)` — a hash of
the point's name, fixed before anything was fitted.

    >>> points = load_points()
    >>> sorted({p.chip for p in points})[:2]
    ['A100 80GB', 'H100 SXM']
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from inferbook.book import bookdata

__all__ = ["INDEX", "QUANTITIES", "NEEDS", "PublishedPoint", "PublishedDataError",
           "load_points", "parse_point", "split_of"]

INDEX = "published/index.json"

QUANTITIES = {
    "decode_tokens_per_s_per_sequence": "tokens/s",
    "output_tokens_per_s": "tokens/s",
    "output_tokens_per_s_per_chip": "tokens/s",
    "ttft_ms": "ms",
}

NEEDS = {
    "output-length": "the figure spans a whole generation, prefill and every decode step "
                     "(`--output N`)",
    "compute-fp8": "its matrix products run in fp8, priced today at the bf16 peak "
                   "(`--compute`)",
    "embedding-rows": "a large vocabulary, whose whole input-embedding table the estimator "
                      "charges every decode step where only B rows are read",
    "collective-latency": "small collectives on several chips, whose fixed cost grows with "
                          "the group",
    "prefill-overlap": "prefill on several chips, its communication overlapped or not",
    "expert-parallel": "experts split over the chips (expert parallelism)",
    "data-parallel": "replicas of the model, each serving a share of the batch",
    "allocated-cache": "attention reads the whole preallocated cache every step, so the "
                       "context is the cache's length",
    "power-limit": "the chips ran below their rated power",
    "mixed-weights": "some weights in another format than the rest",
}

SPLITS = ("fit", "held_out")
_FIELDS = {"id": str, "where": str, "figure": str, "value": (int, float), "quantity": str,
           "chip": str, "chips": int, "model": str, "model_as_published": str,
           "software": str, "weights": str, "kv": str, "compute": str, "tp": int, "dp": int,
           "ep": int, "batch": int, "needs": list, "split": str}
_OPTIONAL = {"prompt": int, "output": int, "context": int, "note": str, "layout": str}


class PublishedDataError(ValueError):
    """A published point that lacks a field, or whose fields contradict each other."""


@dataclass(frozen=True)
class PublishedPoint:
    """One published measurement and everything the estimator needs to predict it."""

    id: str
    source: str              # who published it, in words
    url: str                 # where, at the version or commit below
    version: str
    where: str               # the table, row and column within the source
    figure: str              # the number as printed
    value: float
    quantity: str            # a key of QUANTITIES
    chip: str                # a chip of the registry
    chips: int
    model: str               # a preset
    model_as_published: str
    software: str
    weights: str             # weight format (`quant.parse_weight_format`)
    kv: str                  # KV-cache format
    compute: str             # the format the matrix products ran in
    tp: int                  # tensor-parallel chips per replica
    dp: int                  # replicas
    ep: int                  # chips the experts are split over (1: none)
    batch: int               # sequences over the whole deployment
    needs: tuple[str, ...]
    split: str
    prompt: int | None = None
    output: int | None = None
    context: int | None = None
    note: str = ""
    layout: str | None = None   # the layout that ran, where the source says (None: not said)


def split_of(point_id: str) -> str:
    """'held_out' for about a third of the names, 'fit' for the rest: the first 16 hex digits
    of the name's SHA-256, modulo 3. It reads nothing but the name, so it was fixed before any
    fit and stays fixed when points are added."""
    digest = hashlib.sha256(point_id.encode()).hexdigest()
    return "held_out" if int(digest[:16], 16) % 3 == 0 else "fit"


def _number(figure: str) -> float:
    return float(figure.replace(",", ""))


def parse_point(raw: dict[str, Any], file: dict[str, Any], name: str) -> PublishedPoint:
    """One point of a data file, its file's `defaults` under it, checked field by field."""
    data = {**file.get("defaults", {}), **raw}
    where = f"{name}: point {data.get('id', '?')!r}"
    for key, kind in _FIELDS.items():
        if key not in data:
            raise PublishedDataError(f"{where} lacks {key!r}")
    for key, value in data.items():
        kind = _FIELDS.get(key) or _OPTIONAL.get(key)
        if kind is None:
            raise PublishedDataError(f"{where} has an unknown field {key!r}")
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise PublishedDataError(f"{where}: {key} is {value!r}")
    for key in ("url", "version", "source"):
        if not isinstance(file.get(key), str) or not file[key]:
            raise PublishedDataError(f"{name} lacks its {key!r}")
    point = PublishedPoint(**{**data, "needs": tuple(data["needs"]), "value": float(data["value"])},
                           source=file["source"], url=file["url"], version=file["version"])
    _check(point, where)
    return point


def _check(p: PublishedPoint, where: str) -> None:
    from inferbook.model.presets import PRESETS
    from inferbook.perf import quant
    from inferbook.perf.hardware import CHIPS
    from inferbook.perf.layout_comms import ESTIMATE_LAYOUTS

    problems = []
    if p.layout is not None and p.layout not in ESTIMATE_LAYOUTS:
        problems.append(f"layout {p.layout!r} is not one of {', '.join(ESTIMATE_LAYOUTS)}")
    if p.quantity not in QUANTITIES:
        problems.append(f"quantity {p.quantity!r} is not one of {', '.join(QUANTITIES)}")
    if _number(p.figure) != p.value or p.value <= 0:
        problems.append(f"value {p.value} is not the printed figure {p.figure!r}")
    if p.chip not in CHIPS:
        problems.append(f"chip {p.chip!r} is not in the registry")
    if p.model not in PRESETS:
        problems.append(f"model {p.model!r} is not a preset")
    try:
        quant.parse_weight_format(p.weights)
    except ValueError as err:
        problems.append(f"weights: {err}")
    if p.kv not in quant.KV_FORMATS:
        problems.append(f"kv {p.kv!r} is not one of {', '.join(quant.KV_FORMATS)}")
    if min(p.chips, p.tp, p.dp, p.ep, p.batch) < 1 or p.tp * p.dp != p.chips:
        problems.append(f"tp {p.tp} × dp {p.dp} must be the {p.chips} chips, all at least 1")
    if p.batch % p.dp:
        problems.append(f"batch {p.batch} does not split over {p.dp} replicas")
    decode = p.quantity == "decode_tokens_per_s_per_sequence"
    if decode != (p.context is not None) or decode == (p.prompt is not None):
        problems.append("a decode rate needs a context and no prompt; the rest a prompt")
    if p.quantity.startswith("output_tokens") and not p.output:
        problems.append("a generation rate needs its output length")
    if p.quantity == "ttft_ms" and p.output not in (None, 1):
        problems.append("time to first token generates one token")
    problems += [f"need {n!r} is not one of NEEDS" for n in p.needs if n not in NEEDS]
    if p.split != split_of(p.id):
        problems.append(f"split {p.split!r} is not the rule's {split_of(p.id)!r}")
    if problems:
        raise PublishedDataError(f"{where}: {problems[0]}")


def load_points() -> list[PublishedPoint]:
    """Every point of every file `published/index.json` lists, checked; names unique."""
    index = bookdata.load(INDEX)
    points: list[PublishedPoint] = []
    for name in index["files"]:
        file = bookdata.load(f"published/{name}")
        points += [parse_point(raw, file, name) for raw in file["points"]]
    seen: set[str] = set()
    for p in points:
        if p.id in seen:
            raise PublishedDataError(f"two points are named {p.id!r}")
        seen.add(p.id)
    return points
