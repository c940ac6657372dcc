"""inferbook: the small JAX library behind "Inference by the Numbers".

Start every session with ``inferbook.setup()`` — before anything else uses JAX — so that the
emulated devices for mesh demonstrations exist (see `inferbook.devices`). Importing this
package never starts a JAX backend; submodules load on first use:

    import inferbook
    info = inferbook.setup()
    from inferbook import config, model, decode
"""

from __future__ import annotations

import importlib
from typing import Any

from .devices import DeviceInfo, setup

__version__ = "0.1.0"
__all__ = ["setup", "DeviceInfo", "__version__"]


def __getattr__(name: str) -> Any:
    """Load submodules lazily: ``inferbook.decode`` imports inferbook/decode.py on first use."""
    try:
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'inferbook' has no attribute {name!r}") from None
