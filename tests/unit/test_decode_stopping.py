"""`decode.generate`'s stopping and streaming: several end-of-sequence ids, a per-step view.

A checkpoint may declare several EOS ids (end of text, end of turn); each sequence must stop
at the first of any of them, exactly where a loop that knows only that one id would stop. The
`on_step` callback sees every step's tokens as they are produced — the same tokens the result
holds — and can stop the loop.
"""

import numpy as np
import pytest

from inferbook.model import decode, decoder
from inferbook.model.presets import get_preset

CFG = get_preset("tiny")
PROMPTS = [[5, 17, 3, 99], [7, 1], [120, 33, 33, 33, 8, 2]]
N = 12


@pytest.fixture(scope="module")
def params():
    return decoder.init_params(CFG, seed=4)


@pytest.fixture(scope="module")
def free_run(params):
    """Every sequence's first N tokens, no stopping."""
    return decode.generate(params, CFG, PROMPTS, N).tokens


def first_stop(row, stops):
    ends = [i for i, t in enumerate(row) if t in stops]
    return row[:ends[0] + 1] if ends else row


def test_several_eos_ids_stop_each_sequence_at_the_first_of_them(params, free_run):
    # Two ids that the free run produces, at different steps of different sequences.
    stops = (free_run[0][3], free_run[1][6])
    got = decode.generate(params, CFG, PROMPTS, N, eos_id=list(stops)).tokens
    assert got == [first_stop(row, stops) for row in free_run]
    assert got == decode.naive_generate(params, CFG, PROMPTS, N, eos_id=stops).tokens


def test_one_eos_id_as_a_list_is_that_id_and_an_empty_list_is_none(params, free_run):
    eos = free_run[2][4]
    assert (decode.generate(params, CFG, PROMPTS, N, eos_id=[eos]).tokens
            == decode.generate(params, CFG, PROMPTS, N, eos_id=eos).tokens)
    assert decode.generate(params, CFG, PROMPTS, N, eos_id=[]).tokens == free_run


def test_on_step_sees_each_step_as_the_result_holds_it(params, free_run):
    seen = []
    result = decode.generate(params, CFG, PROMPTS, N, on_step=lambda i, t: seen.append((i, t)))
    assert [i for i, _ in seen] == list(range(N))
    assert np.stack([t for _, t in seen], axis=1).tolist() == free_run == result.tokens


def test_on_step_returning_true_stops_the_loop(params, free_run):
    result = decode.generate(params, CFG, PROMPTS, N, on_step=lambda i, t: i == 4)
    assert result.tokens == [row[:5] for row in free_run]


def test_a_finished_sequence_shows_its_eos_while_others_go_on(params, free_run):
    stop = free_run[1][2]
    seen = []
    result = decode.generate(params, CFG, PROMPTS, N, eos_id=stop,
                             on_step=lambda i, t: seen.append(t.tolist()))
    for b, row in enumerate(result.tokens):
        assert [step[b] for step in seen][:len(row)] == row
        assert all(step[b] == stop for step in seen[len(row):])


@pytest.mark.parametrize("eos", [[3, 999], [True], ["2"], -1])
def test_bad_eos_lists_are_refused(params, eos):
    with pytest.raises(ValueError, match="eos_id"):
        decode.generate(params, CFG, PROMPTS, 2, eos_id=eos)
