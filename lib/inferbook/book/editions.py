"""The configuration of each edition of the site, from `_config.yml` and one overlay file.

The English site is configured by `_config.yml` and `_toc.yml`, as any Jupyter Book is. Another
edition differs in a few settings only — its language, title, reader, where its Colab button
points — so it is described by an overlay, `_config.<lang>.yml`, merged over `_config.yml`
(mappings key by key, everything else replaced), plus the captions of `_toc.yml`'s parts in
its language under the overlay's key ``toc_captions``. Nothing else is repeated, so a setting
added to `_config.yml` reaches every edition.

    python -m inferbook.book.editions prepare zh    # writes _build/zh/_config.yml, _toc.yml

`make book` then builds the edition with ``jupyter-book build . --config _build/zh/_config.yml
--toc _build/zh/_toc.yml --path-output _build/zh`` and copies its pages to `_build/html/zh`.
The edition reads its executed notebooks from the English build's cache (same code cells,
same hash: see `tests/book_cache.py verify`), so it executes nothing.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

from inferbook.book.language import DEFAULT, LANGUAGES

__all__ = ["merge", "edition_config", "edition_toc", "prepare", "BUILD"]

ROOT = Path(__file__).resolve().parents[3]
BUILD = "_build"


def merge(base: Any, overlay: Any) -> Any:
    """`overlay` over `base`: mappings merged key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        out = copy.deepcopy(base)
        for key, value in overlay.items():
            out[key] = merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(overlay)


def _load(path: Path) -> Any:
    import yaml
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def edition_config(lang: str, root: Path = ROOT) -> dict[str, Any]:
    """`lang`'s configuration: `_config.yml` with `_config.<lang>.yml` over it, its execution
    cache the English build's (an absolute path: the edition builds in its own folder)."""
    if lang == DEFAULT or lang not in LANGUAGES:
        raise ValueError(f"no edition {lang!r}: the editions besides {DEFAULT!r} are "
                         f"{', '.join(x for x in LANGUAGES if x != DEFAULT)}")
    overlay = _load(root / f"_config.{lang}.yml")
    overlay.pop("toc_captions", None)
    config = merge(_load(root / "_config.yml"), overlay)
    config.setdefault("execute", {})["cache"] = str((root / BUILD / ".jupyter_cache").resolve())
    return config


def edition_toc(lang: str, root: Path = ROOT) -> dict[str, Any]:
    """`_toc.yml` with its parts' captions in `lang` (every caption must have one)."""
    captions = _load(root / f"_config.{lang}.yml").get("toc_captions") or {}
    toc = _load(root / "_toc.yml")
    for part in toc.get("parts", []):
        if "caption" in part:
            if part["caption"] not in captions:
                raise ValueError(f"_config.{lang}.yml: toc_captions has no {lang} caption for "
                                 f"{part['caption']!r}")
            part["caption"] = captions[part["caption"]]
    return toc


def prepare(lang: str, root: Path = ROOT) -> Path:
    """Write `lang`'s `_config.yml` and `_toc.yml` under `_build/<lang>/`; returns the folder."""
    import yaml
    folder = root / BUILD / lang
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in (("_config.yml", edition_config(lang, root)),
                       ("_toc.yml", edition_toc(lang, root))):
        (folder / name).write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False),
                                   encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferbook.book.editions",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prepare",))
    parser.add_argument("lang", choices=[x for x in LANGUAGES if x != DEFAULT])
    args = parser.parse_args(argv)
    try:
        folder = prepare(args.lang)
    except (OSError, ValueError) as err:
        print(f"editions: {err}", file=sys.stderr)
        return 2
    print(folder.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
