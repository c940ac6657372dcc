"""`inferbook bench --levers`: what each lever runs is the library's step, changed in that one
respect — the same tokens from every layout and from the one-program step — and the record
reports before, after and change as measured. (How much each lever moves the step is a
property of the device: chapter 2 tabulates the recorded runs.)"""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.cli import main
from inferbook.model import decode, decode_layout, decoder, kvcache
from inferbook.model.presets import PRESETS
from inferbook.model.sampling import GREEDY
from inferbook.perf import decode_levers, timing


def test_the_one_program_step_samples_what_the_library_step_samples():
    cfg = PRESETS["tiny"]
    params = decode_layout.to_decode_layout(decoder.init_params(cfg, 3), cfg)
    library = timing.decode_step_timer(params, cfg, 2, 9, filled=8)
    fused = decode_levers.one_program_stepper(params, cfg, 2, 8)
    for _ in range(3):           # the cache is rewound each call: the same step every time
        np.testing.assert_array_equal(np.asarray(fused()), np.asarray(library()))


def test_every_in_process_lever_is_reported_before_and_after():
    record = decode_levers.measure_levers(PRESETS["tiny"], rounds=1, children=False,
                                          show_progress=False)
    assert [x["lever"] for x in record["levers"]] == list(decode_levers.IN_PROCESS)
    for lever in record["levers"]:
        assert (lever["before"], lever["after"]) == decode_levers.IN_PROCESS[lever["lever"]]
        assert lever["before_s"] > 0 and lever["after_s"] > 0
        assert lever["change"] == pytest.approx(lever["after_s"] / lever["before_s"] - 1)
    # The layouts chain: each lever starts where the one before it ended.
    pairs = [(x["before"], x["after"]) for x in record["levers"]]
    assert pairs[0][1] == pairs[1][0] == "fused" and pairs[1][1] == "decode"
    assert all(before == "decode" for before, _ in pairs[3:])
    assert record["batch"] == 1 and record["model"] == "tiny" and record["load_average_before"]


def test_a_child_lever_changes_its_own_process_only():
    mine = os.sched_getaffinity(0)
    code = ("import inferbook.perf.decode_levers as d, json; "
            "print(json.dumps(d.child_step('tiny', 1)))")
    env = {**os.environ, **decode_levers.CHILD_LEVERS["one core instead of all"]}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["cores"] == 1 and child["median_s"] > 0
    assert os.sched_getaffinity(0) == mine


@pytest.mark.parametrize("argv", [["--levers", "--peer", "on"], ["--levers", "--batches", "2"],
                                  ["--levers", "--dtype", "bfloat16"]])
def test_levers_refuse_options_they_do_not_measure(capsys, argv):
    assert main(["bench", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--levers measures batch 1" in err


def test_the_bfloat16_layout_stores_its_matrices_narrow_and_computes_in_float32():
    cfg = PRESETS["tiny"]
    params = decoder.init_params(cfg, 0)
    narrow = decode_layout.to_decode_layout(params, cfg, dtype=jnp.bfloat16)
    assert narrow["layers"][0]["wqkv_t"].dtype == jnp.bfloat16
    assert narrow["embed"].dtype == jnp.float32 and narrow["layers"][0]["attn_norm"].dtype \
        == jnp.float32
    tokens = jnp.array([[1, 2, 3]])
    logits = decoder.forward(narrow, cfg, tokens)
    assert logits.dtype == jnp.float32
    np.testing.assert_allclose(logits, decoder.forward(params, cfg, tokens), atol=0.1)


def test_in_one_program_xla_copies_the_cache_it_reads_and_writes():
    """Why `decode.generate` appends in a program of its own (chapter 2 says so): compiled
    with the append, the step copies every layer's keys and values; the step alone and the
    donated append alone copy none."""
    cfg = PRESETS["tiny"]
    params = decode_layout.to_decode_layout(decoder.init_params(cfg, 0), cfg)
    B, S = 2, 33
    cache = kvcache.init_cache(cfg, B, S)
    tok, done = jnp.zeros((B,), jnp.int32), jnp.zeros((B,), bool)
    key = jax.random.key(0)
    shape = rf"f32\[{B},{cfg.K},{S},{cfg.H}\]"

    def copies(text):
        return len(re.findall(rf"= {shape}\S* copy\(", text))
    fused = decode_levers.step_and_append.lower(params, cfg, tok, done, cache, key)
    assert copies(fused.compile().as_text()) >= 2 * cfg.L
    step = decode.next_token.lower(params, cfg, tok, done, cache, key, GREEDY, -1)
    _, _, _, (k, v) = decode.next_token(params, cfg, tok, done, cache, key, GREEDY, -1)
    append = decode.append_in_place.lower(cache, k, v)
    assert copies(step.compile().as_text()) == 0 and copies(append.compile().as_text()) == 0
