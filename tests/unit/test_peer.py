"""The benchmark's peer: Hugging Face transformers' `generate` on the library's architecture.

Only its plumbing can be checked on a CPU (the timing comparison belongs to a GPU run): the
model it builds has exactly the library's parameters, and its timer generates what it is asked.
"""

import numpy as np
import pytest

from inferbook.model.presets import get_preset

pytestmark = pytest.mark.hf


def test_the_peer_is_the_same_architecture_and_generates():
    """HF's model for the comparison has exactly the library's parameters; its timer runs."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import transformers

    from inferbook.perf import counts, hf_peer
    cfg = get_preset("tiny")
    hf = transformers.LlamaForCausalLM(hf_peer.hf_config(cfg))
    assert sum(p.numel() for p in hf.parameters()) == counts.param_count(cfg)
    generate = hf_peer.hf_generate_timer(cfg, batch=1, prompt=8, dtype="float32", compile=False)
    assert "eager" in generate.description          # named for what it ran, not compiled
    assert generate(2).shape == (1, 8 + 2)          # prompt + exactly the tokens asked for
    assert np.isfinite(hf_peer.per_token_seconds(generate, new_tokens=1, repeats=1))
