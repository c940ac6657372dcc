"""The Pallas kernels against the reference, run by Pallas' interpreter on the CPU.

Interpreting is slow, so the shapes are tiny and the examples few; the kernels are the same
programs a GPU compiles (`interpret` only changes who executes them). Head dimensions below
16 and query rows below 16 exercise the padding to Triton's minimum tile.
"""

import jax
from attention_cases import assert_matches_reference, cases
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.kernels.pallas import (
    default_interpret,
    pallas_flash_attention,
    pallas_flash_decoding,
)


def test_kernels_are_interpreted_on_cpu():
    assert default_interpret() == (jax.default_backend() == "cpu")


@settings(max_examples=5)
@given(case=cases(max_T=20, S_choices=(16, 32, 48)), block_k=st.sampled_from([8, 16]))
def test_pallas_flash_attention_matches_the_reference(case, block_k):
    out, lse = pallas_flash_attention(*case.arrays, window=case.window, block_q=8, block_k=block_k)
    assert_matches_reference(case, out, lse)


@settings(max_examples=5)
@given(case=cases(max_T=3, S_choices=(16, 32, 48)), num_splits=st.sampled_from([1, 2, 3]))
def test_pallas_flash_decoding_matches_the_reference(case, num_splits):
    out, lse = pallas_flash_decoding(*case.arrays, window=case.window, num_splits=num_splits,
                                     block_k=8)
    assert_matches_reference(case, out, lse)
