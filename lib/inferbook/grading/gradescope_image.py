"""What Gradescope's image installs: this library as a wheel, and its requirements pinned.

The autograder package (`gradescope.py`) carries no hand-kept list of packages. What it
installs is derived from the library itself:

- `library_metadata()` reads the library's own requirements — pyproject's `dependencies` —
  from the checkout's `pyproject.toml` when the library runs from one, and otherwise from
  the installed distribution's metadata (`Requires-Dist`);
- `pinned_requirements()` adds what grading needs on top (`GRADING_NEEDS`: the Jupyter
  kernel and client that run a submission, nbformat that reads it) and closes the list over
  the requirements of every package in it, each pinned to the version installed where the
  package is made. Markers are evaluated here: make the package on the platform and Python
  of the image (Linux, 3.11+). A requirement not installed here is kept as written;
- `write_library_wheel()` writes the library as a pure-Python wheel whose metadata states
  the same requirements, so that installing it needs no build step and no network.

`setup.sh` installs both with `--no-deps`, as a lock file is installed, and then has pip
check that every installed package's requirements are met: a dependency missing from the
list fails the image's build instead of every submission's grading.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import inferbook

__all__ = ["GRADING_NEEDS", "LibraryMetadata", "library_metadata", "pinned_requirements",
           "write_library_wheel"]

# What grading needs besides the library's own dependencies: a kernel to run the submission
# in, the client that drives it, and the reader of .ipynb files.
GRADING_NEEDS = ("ipykernel", "jupyter_client", "nbformat")
WHEEL_DATE = (1980, 1, 1, 0, 0, 0)       # fixed, so that the same source gives the same wheel


@dataclass(frozen=True)
class LibraryMetadata:
    """The fields of the library's pyproject that its wheel repeats."""

    version: str
    requires_python: str
    dependencies: tuple[str, ...]
    scripts: tuple[tuple[str, str], ...]           # (command, "module:function")


def library_metadata() -> LibraryMetadata:
    """The library's version, Python and requirements: the checkout's pyproject.toml if the
    library runs from a checkout, else the installed distribution's metadata."""
    pyproject = Path(inferbook.__file__).resolve().parents[2] / "pyproject.toml"
    if pyproject.is_file():
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        if project.get("name") == "inferbook":
            return LibraryMetadata(project.get("version", inferbook.__version__),
                                   project.get("requires-python", ""),
                                   tuple(project.get("dependencies", ())),
                                   tuple(sorted(project.get("scripts", {}).items())))
    try:
        dist = importlib.metadata.distribution("inferbook")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError("the library is neither a checkout with its pyproject.toml nor an "
                           "installed distribution: its requirements cannot be read") from None
    requires = tuple(r for r in dist.requires or () if "extra ==" not in r.replace("'", '"'))
    scripts = tuple(sorted((e.name, e.value) for e in dist.entry_points
                           if e.group == "console_scripts"))
    return LibraryMetadata(dist.version, dist.metadata.get("Requires-Python", ""), requires,
                           scripts)


def pinned_requirements(requirements: tuple[str, ...] | None = None) -> list[str]:
    """`requirements` (default: the library's and `GRADING_NEEDS`) and everything they
    require, each as `name==version` of the distribution installed here, sorted by name."""
    # packaging: a dependency of matplotlib, and so always here with the library
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    if requirements is None:
        requirements = library_metadata().dependencies + GRADING_NEEDS
    pinned: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = importlib.metadata.distribution(req.name)
        except importlib.metadata.PackageNotFoundError:
            pinned.setdefault(key[0], str(req))          # not here: as written
            continue
        pinned[key[0]] = f"{dist.metadata['Name']}=={dist.version}"
        for text in dist.requires or ():
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": extra})
                                         for extra in ("", *req.extras)):
                todo.append(sub)
    return [pinned[name] for name in sorted(pinned)]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def write_library_wheel(folder: Path) -> Path:
    """Write this library as `inferbook-VERSION-py3-none-any.whl` into `folder`; its path."""
    meta = library_metadata()
    package = Path(inferbook.__file__).resolve().parent
    files = {f"inferbook/{p.relative_to(package).as_posix()}": p.read_bytes()
             for p in sorted(package.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    info = f"inferbook-{meta.version}.dist-info"
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: inferbook\nVersion: {meta.version}\n"
        + (f"Requires-Python: {meta.requires_python}\n" if meta.requires_python else "")
        + "".join(f"Requires-Dist: {r}\n" for r in meta.dependencies)).encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: inferbook.grading\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    if meta.scripts:
        files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{name} = {target}\n" for name, target in meta.scripts)).encode()
    record = f"{info}/RECORD"
    files[record] = ("".join(f"{name},{_record_hash(data)},{len(data)}\n"
                             for name, data in files.items()) + f"{record},,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"inferbook-{meta.version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, WHEEL_DATE)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return wheel
