"""inferbook: the small JAX library behind "Inference by the Numbers".

Start every session with ``inferbook.setup()`` — before anything else uses JAX — so that the
emulated devices for mesh demonstrations exist (see `inferbook.parallel.devices`). Importing this
package never starts a JAX backend; submodules load on first use:

    import inferbook
    info = inferbook.setup()
    from inferbook.model import decode, decoder, presets

The packages follow the parts of the book: `model` (foundations), `perf` (performance
models), `memory` (the KV cache), `kernels`, `parallel` (many chips), `serving` (the
engine), plus `grading` (exercises), `book` (the book's own helpers) and `cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

from inferbook.parallel.devices import DeviceInfo, setup

__version__ = "0.1.0"
__all__ = ["setup", "DeviceInfo", "__version__"]


def __getattr__(name: str) -> Any:
    """Load subpackages lazily: ``inferbook.perf`` imports inferbook/perf on first use."""
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'inferbook' has no attribute {name!r}") from None
