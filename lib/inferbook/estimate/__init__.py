"""The estimator: the sources' equations as functions of a ModelConfig and a Chip.

Every performance number in the book comes from here, and every function is tied to the
executable model so its prediction can be checked: parameter and KV-cache bytes against the
arrays the model allocates, FLOPs against XLA's cost analysis of the compiled program,
collective bytes against the collectives in a sharded program, step times against measurement.

One module per concept; everything is re-exported here, so ``from inferbook import estimate``
and ``estimate.kv_bytes_per_token(cfg)`` is all a chapter needs.

  params     parameter counts and bytes, KV-cache bytes, FLOPs per token and per forward pass
  comms      1D/2D communication time, optimal 2D split, limits, latency-bound collectives
  collectives  exact collectives of each sharded layout (checked against compiled programs)
"""

from .params import *  # noqa: F401,F403
from .params import __all__ as _params_all
from .comms import *  # noqa: F401,F403
from .comms import __all__ as _comms_all
from .collectives import *  # noqa: F401,F403
from .collectives import __all__ as _collectives_all

__all__ = [*_params_all]
__all__ += _comms_all
__all__ += _collectives_all

# Speculative decoding (Leviathan et al. 2023) and serving-time estimates (engine chapters).
from .speculative import *  # noqa: F401,F403,E402
from .speculative import __all__ as _speculative_all  # noqa: E402
from .serving import *  # noqa: F401,F403,E402
from .serving import __all__ as _serving_all  # noqa: E402

__all__ += [*_speculative_all, *_serving_all]
