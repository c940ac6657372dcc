"""Loading a checkpoint onto a mesh, each process reading only the blocks its devices hold.

`model.checkpoint.load_checkpoint` reads every tensor into host memory and `shard_params`
then places it; on a pod that would make every host read the whole model. Here each weight
is built with `jax.make_array_from_callback`, which asks only for the blocks of this
process's devices, and each block is read with safetensors' lazy slices (`safe_open(...)
.get_slice(name)[rows, columns]`), which read those bytes of the file and no others. A
process of a 4-way 1d-ws job thus reads a quarter of each split matrix, plus the small
replicated vectors (norm gains), once per block however many of its devices hold it.

Hugging Face stores a linear layer as [out, in] and the library as [in, out], and some
families pack several matrices into one tensor: how a block of the library's leaf maps back
onto its checkpoint tensor is each name rule's `mapping` (`model.hf_names.Rule`). Everything
`load_checkpoint` checks is checked here too, from the files' headers before any data is
read: every tensor the model needs is present, floating point and of the shape the config
implies, and no tensor is left over. (`tests/unit/test_checkpoint_shards.py` checks the
loaded weights against `load_checkpoint`, and the bytes read against the blocks held.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError, safe_open

from inferbook.model.checkpoint import read_checkpoint_family, weight_files
from inferbook.model.decoder import Params, param_shapes
from inferbook.model.hf_names import Rule, base_prefix, ignorable, layer_rules, top_rules
from inferbook.model.safetensors_io import DTYPES, CheckpointError, read_header, require_floating

__all__ = ["CheckpointShards"]

Leaf = tuple              # ("embed",) or ("layers", i, "wq")


class CheckpointShards:
    """A checkpoint directory whose weights are read block by block.

        shards = CheckpointShards(path)            # config and headers, checked
        params = shards.load(shardings, jnp.float32)   # this process's blocks only
        shards.bytes_read                          # bytes of tensor data read so far
    """

    def __init__(self, directory: str | Path) -> None:
        self.cfg, self.family = read_checkpoint_family(directory)
        self.entries: dict[str, tuple[Path, Any]] = {}
        for path in weight_files(Path(directory)):
            self.entries.update({name: (path, e) for name, e in read_header(path).items()})
        self.bytes_read = 0
        self._shapes = param_shapes(self.cfg)
        self._rules = self._checked_rules()

    def _checked_rules(self) -> dict[Leaf, tuple[Rule, str]]:
        cfg, fam = self.cfg, self.family
        prefix = base_prefix(fam, self.entries)      # as load_checkpoint finds it
        shapes = self._shapes
        groups = [((), top_rules(cfg, fam, prefix), shapes)]
        groups += [(("layers", i), layer_rules(cfg, fam, i, prefix), s)
                   for i, s in enumerate(shapes["layers"])]
        rules: dict[Leaf, tuple[Rule, str]] = {}
        used: set[str] = set()
        for where, group, leaf_shapes in groups:
            for rule in group:
                for name in rule.sources:
                    if name not in self.entries:
                        raise CheckpointError(f"checkpoint is missing tensor {name!r}")
                    require_floating(name, np.empty(0, DTYPES[self.entries[name][1].dtype]))
                    used.add(name)
                for lib in rule.leaves:
                    self._check_shape(rule, lib, tuple(leaf_shapes[lib]))
                    rules[where + (lib,)] = (rule, lib)
        left = sorted(n for n in self.entries if n not in used and not ignorable(cfg, fam, n))
        if left:
            raise CheckpointError(f"checkpoint has tensors the model does not use, e.g. "
                                  f"{left[0]!r} (an unsupported architecture?)")
        return rules

    def _check_shape(self, rule: Rule, lib: str, shape: tuple[int, ...]) -> None:
        """The source shapes the leaf's shape implies, against the headers."""
        if rule.mapping == "transpose":
            want = [shape[::-1]]
        elif rule.mapping == "same":
            want = [shape]
        elif rule.mapping == "split":
            w = shape[:-1] + (sum(width for _, width in rule.parts),)
            want = [w[::-1] if rule.transposed else w]
        elif rule.mapping == "stack":
            want = [shape[1:][::-1]] * len(rule.sources)
        else:
            return                    # only `build` knows; `block` checks what it builds
        for name, expected in zip(rule.sources, want):
            got = self.entries[name][1].shape
            if tuple(got) != tuple(expected):
                raise CheckpointError(f"tensor {name!r} has shape {tuple(got)}, which does not "
                                      f"fit the config (library {lib} {shape})")

    def _leaf_shape(self, leaf: Leaf) -> tuple[int, ...]:
        shape = self._shapes["layers"][leaf[1]][leaf[2]] if leaf[0] == "layers" \
            else self._shapes[leaf[0]]
        return tuple(shape)

    def _read(self, name: str, index: tuple[slice, ...]) -> np.ndarray:
        path = self.entries[name][0]
        try:
            with safe_open(str(path), framework="np") as f:
                block = f.get_slice(name)[index] if index else f.get_tensor(name)
        except (SafetensorError, OSError) as err:
            raise CheckpointError(f"{path}: {str(err).splitlines()[0]}") from None
        self.bytes_read += block.nbytes
        return block

    def block(self, leaf: Leaf, index: tuple[slice, ...]) -> np.ndarray:
        """Rows and columns `index` of the library's leaf (e.g. ("layers", 0, "wq")), read
        from the checkpoint: only the bytes of that block (whole tensors for a rule whose
        mapping only `build` knows)."""
        rule, lib = self._rules[leaf]
        shape = self._leaf_shape(leaf)
        idx = tuple(slice(*s.indices(n)[:2]) for s, n in
                    zip(tuple(index) + (slice(None),) * (len(shape) - len(index)), shape))
        if rule.mapping == "transpose":
            return self._read(rule.sources[0], idx[::-1]).T
        if rule.mapping == "same":
            return self._read(rule.sources[0], idx)
        if rule.mapping == "split":
            start = 0
            for name, width in rule.parts:
                if name == lib:
                    break
                start += width
            cols = slice(idx[-1].start + start, idx[-1].stop + start)
            if rule.transposed:
                return self._read(rule.sources[0], (cols,) + idx[:-1][::-1]).T
            return self._read(rule.sources[0], idx[:-1] + (cols,))
        if rule.mapping == "stack":
            experts = range(*idx[0].indices(shape[0]))
            return np.stack([self._read(rule.sources[e], idx[1:][::-1]).T for e in experts])
        whole = rule.build([self._read(name, ()) for name in rule.sources])[lib]
        if tuple(whole.shape) != shape:
            raise CheckpointError(f"tensor {rule.sources[0]!r} does not fit the config "
                                  f"(library {lib} {shape}, built {tuple(whole.shape)})")
        return whole[idx]

    def load(self, shardings: Any, dtype: Any = None) -> Params:
        """The params pytree as global arrays placed by `shardings` (a pytree of
        `NamedSharding`s mirroring the params, e.g. from `sharding.param_specs`), reading
        only the blocks of this process's devices. `dtype` casts (default: as stored)."""
        def leaf_array(leaf: Leaf, sharding: Any) -> jax.Array:
            seen: dict[tuple, np.ndarray] = {}

            def read(index: tuple[slice, ...]) -> np.ndarray:
                key = tuple((s.start, s.stop) for s in index)
                if key not in seen:
                    block = self.block(leaf, index)
                    seen[key] = np.ascontiguousarray(block, dtype=dtype or block.dtype)
                return seen[key]

            return jax.make_array_from_callback(self._leaf_shape(leaf), sharding, read)

        params: Params = {k: leaf_array((k,), s) for k, s in shardings.items() if k != "layers"}
        params["layers"] = [{k: leaf_array(("layers", i, k), s) for k, s in layer.items()}
                            for i, layer in enumerate(shardings["layers"])]
        return params
