"""`inferbook generate --mesh SHAPE --layout L`: the unsharded tokens, clear errors. (A mixture of
experts split over its experts: test_hf_parity_families.py.)"""

import json
import subprocess
import sys

import pytest

from inferbook.cli import main

BASE = ["generate", "--model", "tiny", "--seed", "2", "--prompt-ids", "1,2,3",
        "--prompt-ids", "4,5", "--max-new-tokens", "4", "--json"]


def run_cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def unsharded():
    import jax

    from inferbook.model.decode import generate
    from inferbook.model.decoder import init_params
    from inferbook.model.presets import get_preset
    cfg = get_preset("tiny")
    return generate(init_params(cfg, 2), cfg, [[1, 2, 3], [4, 5]], 4,
                    key=jax.random.key(2)).tokens


def test_a_sharded_run_gives_the_tokens_of_the_unsharded_one(capsys, unsharded):
    for extra in ([], ["--mesh", "2x2", "--layout", "2d-ws"], ["--mesh", "4"],
                  ["--mesh", "2", "--layout", "weight-gathered"]):
        code, out, err = run_cli(capsys, *BASE, *extra)
        assert code == 0, err
        assert json.loads(out)["tokens"] == unsharded, extra


def test_the_command_sets_up_its_own_devices_in_a_fresh_process(unsharded):
    # A fresh Python starts with one CPU device; the 2x2 mesh needs the command's own setup.
    r = subprocess.run([sys.executable, "-m", "inferbook", *BASE, "--mesh", "2x2",
                        "--layout", "2d-ws"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == unsharded


@pytest.mark.parametrize("extra, message", [
    (["--mesh", "4x4"], "needs 16 devices but only 8 exist"),
    (["--mesh", "2x4"], "N=4 query heads do not split 8 ways"),
    (["--mesh", "8", "--layout", "2d-ws"], "2d-ws"),
    (["--mesh", "2y4"], "is not of the form"),
    (["--mesh", "0"], "is not of the form"),
    (["--layout", "2d-ws"], "--layout needs --mesh"),
    (["--mesh", "2", "--layout", "expert-parallel"], "tiny has no mixture of experts to split"),
])
def test_a_mesh_or_layout_the_model_cannot_take_is_exit_2_and_one_line(capsys, extra, message):
    code, out, err = run_cli(capsys, *BASE, *extra)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_the_command_offers_every_layout_of_the_library():
    from inferbook.cli.generate import MESH_LAYOUTS
    from inferbook.parallel.layout_rules import LAYOUTS
    assert set(MESH_LAYOUTS) == set(LAYOUTS)
