"""Reading a checkpoint block by block (`parallel.checkpoint_shards`) against reading it whole.

The weights placed on a mesh must equal `load_checkpoint`'s, for every way a family stores a
leaf (transposed, as is, packed side by side, stacked experts); a process must read exactly
the bytes of its devices' distinct blocks; and a broken checkpoint is refused with the same
message as by `load_checkpoint`, from the headers, before any block is read.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hf_families import build
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from inferbook.model import decoder
from inferbook.model.checkpoint import (
    CheckpointError,
    load_checkpoint,
    read_safetensors,
    save_checkpoint,
    write_safetensors,
)
from inferbook.model.presets import get_preset
from inferbook.parallel.checkpoint_shards import CheckpointShards
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan, param_specs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    cfg = get_preset("tiny")
    save_checkpoint(path, cfg, decoder.init_params(cfg, 5))
    return path


def same_leaves(a, b):
    return all(jax.tree.leaves(jax.tree.map(
        lambda x, y: x.shape == y.shape and bool(np.array_equal(np.asarray(x), np.asarray(y))),
        a, b)))


@pytest.mark.parametrize("mesh, layout", [("4", "1d-ws"), ("2x4", "2d-ws")])
def test_a_layouts_blocks_are_the_whole_checkpoints(tiny, mesh, layout):
    cfg, whole = load_checkpoint(tiny, jnp.float32)
    plan = make_plan(cfg, named_mesh(mesh), layout)
    shardings = jax.tree.map(lambda s: NamedSharding(plan.mesh, s), param_specs(cfg, plan))
    shards = CheckpointShards(tiny)
    params = shards.load(shardings, jnp.float32)
    assert same_leaves(params, whole)
    assert jax.tree.leaves(jax.tree.map(lambda x, s: x.sharding == s, params, shardings))
    # One process holds every device here: each distinct block is read once, so the bytes
    # read are the checkpoint's tensor bytes exactly.
    assert shards.bytes_read == sum(x.nbytes for x in jax.tree.leaves(whole))


def odd_shardings(params, mesh):
    """Split each leaf's last axis over 4 devices where it divides, else its first over 2,
    else replicate: blocks that cut every kind of packed tensor mid-way."""
    def spec(x):
        if x.shape[-1] % 4 == 0:
            return P(*([None] * (x.ndim - 1)), "y")
        if x.shape[0] % 2 == 0:
            return P("x")
        return P()
    return jax.tree.map(lambda x: NamedSharding(mesh, spec(x)), params)


@pytest.mark.hf
@pytest.mark.parametrize("family", ["phi3", "mixtral", "gpt2", "qwen2_moe"])
def test_packed_and_stacked_tensors_are_read_block_by_block(tmp_path, family):
    build(family, tmp_path, seed=3)
    cfg, whole = load_checkpoint(tmp_path)
    shards = CheckpointShards(tmp_path)
    params = shards.load(odd_shardings(whole, named_mesh((2, 4))))
    assert same_leaves(params, whole)


def test_a_process_reads_the_distinct_blocks_of_its_devices_only(tiny):
    """The callback `load` gives JAX sees only addressable devices; here one process holds
    all eight, so ask for the blocks of two of them, as a process of a four-process job
    would, and count the bytes."""
    cfg, whole = load_checkpoint(tiny, jnp.float32)
    plan = make_plan(cfg, named_mesh("2x4"), "2d-ws")
    mine = list(plan.mesh.devices.flat[:2])
    shards = CheckpointShards(tiny)
    expected = 0
    for path, spec in jax.tree_util.tree_leaves_with_path(param_specs(cfg, plan)):
        leaf = tuple(getattr(k, "key", getattr(k, "idx", None)) for k in path)
        full = np.asarray(whole[leaf[0]] if len(leaf) == 1 else whole["layers"][leaf[1]][leaf[2]])
        index = NamedSharding(plan.mesh, spec).devices_indices_map(full.shape)
        blocks = {tuple((s.indices(n)[0], s.indices(n)[1]) for s, n in zip(index[d], full.shape))
                  for d in mine}
        for block in blocks:
            got = shards.block(leaf, tuple(slice(a, b) for a, b in block))
            np.testing.assert_array_equal(got, full[tuple(slice(a, b) for a, b in block)])
            expected += got.nbytes
    assert shards.bytes_read == expected
    assert expected < sum(x.nbytes for x in jax.tree.leaves(whole))


def rewrite(path, change):
    tensors = {k: np.array(v) for k, v in read_safetensors(path / "model.safetensors").items()}
    change(tensors)
    write_safetensors(path / "model.safetensors", tensors)


@pytest.mark.parametrize("change", [
    lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
    lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": np.zeros((3, 64), np.float32)}),
    lambda t: t.update({"model.layers.0.extra.weight": np.zeros(4, np.float32)}),
    lambda t: t.update({"model.norm.weight": np.ones(64, np.int32)}),
], ids=["missing", "misshapen", "left over", "integer"])
def test_a_broken_checkpoint_is_refused_as_load_checkpoint_refuses_it(tmp_path, change):
    cfg = get_preset("tiny")
    save_checkpoint(tmp_path, cfg, decoder.init_params(cfg, 0))
    rewrite(tmp_path, change)
    with pytest.raises(CheckpointError) as whole:
        load_checkpoint(tmp_path)
    with pytest.raises(CheckpointError) as blocks:
        CheckpointShards(tmp_path)
    assert str(blocks.value) == str(whole.value)
