"""Parity with Hugging Face transformers, the independent reference for the whole model.

A tiny random LlamaForCausalLM is saved with save_pretrained and loaded by the library with
numpy alone; logits and greedy tokens must agree, for single prompts and for a ragged batch.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402

from inferbook.model import decode, decoder  # noqa: E402
from inferbook.model.checkpoint import load_checkpoint  # noqa: E402

pytestmark = pytest.mark.hf

PROMPTS = [[5, 17, 3, 99, 42, 8, 61], [7, 1], [120, 33, 33, 33]]


@pytest.fixture(scope="module", params=[
    dict(num_key_value_heads=2, tie_word_embeddings=False),      # GQA
    dict(num_key_value_heads=1, tie_word_embeddings=True),       # MQA, shared embeddings
    dict(num_key_value_heads=4, tie_word_embeddings=False, head_dim=24),  # MHA, H != D/N
], ids=["gqa", "mqa-tied", "mha-wide-heads"])
def hf_checkpoint(request, tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_theta=10_000.0, **request.param)
    hf = transformers.LlamaForCausalLM(config).eval()
    # HF initialises with std 0.02, which makes every logit nearly equal and greedy decoding a
    # coin toss between near-ties; unit-scale weights give decisive, comparable outputs.
    with torch.no_grad():
        for name, w in hf.named_parameters():
            if "norm" not in name:
                w.normal_(0.0, 1.0 / np.sqrt(w.shape[-1]))
    path = tmp_path_factory.mktemp("hf") / "tiny-llama"
    hf.save_pretrained(path)
    return hf, path


def hf_last_logits(hf, prompt):
    with torch.no_grad():
        return hf(torch.tensor([prompt])).logits[0, -1].numpy()


def test_last_position_logits_match(hf_checkpoint):
    hf, path = hf_checkpoint
    cfg, params = load_checkpoint(path, dtype=jnp.float32)
    tokens, lengths = decode.pad_prompts(PROMPTS)
    ours = np.asarray(decoder.forward(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths)))
    for b, prompt in enumerate(PROMPTS):
        np.testing.assert_allclose(ours[b, len(prompt) - 1], hf_last_logits(hf, prompt),
                                   atol=1e-4, rtol=0)


def test_prefill_logits_match(hf_checkpoint):
    hf, path = hf_checkpoint
    cfg, params = load_checkpoint(path, dtype=jnp.float32)
    from inferbook.model import kvcache
    tokens, lengths = decode.pad_prompts(PROMPTS)
    cache = kvcache.init_cache(cfg, len(PROMPTS), tokens.shape[1])
    logits, _ = decode.prefill(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths), cache)
    for b, prompt in enumerate(PROMPTS):
        np.testing.assert_allclose(np.asarray(logits[b]), hf_last_logits(hf, prompt),
                                   atol=1e-4, rtol=0)


def test_greedy_tokens_match_alone_and_batched(hf_checkpoint):
    hf, path = hf_checkpoint
    cfg, params = load_checkpoint(path, dtype=jnp.float32)
    n = 12
    expected = []
    for prompt in PROMPTS:
        with torch.no_grad():
            out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
        expected.append(out[0, len(prompt):].tolist())
    alone = [decode.generate(params, cfg, [p], n).tokens[0] for p in PROMPTS]
    batched = decode.generate(params, cfg, PROMPTS, n).tokens
    assert alone == expected
    assert batched == expected
