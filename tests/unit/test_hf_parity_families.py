"""Parity with Hugging Face transformers for every supported family.

For each family a tiny random model is built and saved by transformers (hf_families.py, where
each family's features are switched on); the library loads the directory with numpy alone and
must give transformers' logits (float32) at every prompt's last position, and `inferbook
generate --checkpoint` must print transformers' greedy tokens, for each prompt alone and for
a ragged batch. Then each of the family's features that a config field switches is switched
off on the same weights, and the logits must move well past the parity tolerance: the test
configs are chosen so that no feature is idle (a window shorter than the prompts, a group
limit that binds, a rotary band with pairs in it, multipliers away from 1).
"""

import dataclasses
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402
from hf_families import BASE, FAMILIES, build  # noqa: E402

from inferbook.cli import main  # noqa: E402
from inferbook.model import decode, decoder  # noqa: E402
from inferbook.model.checkpoint import load_checkpoint  # noqa: E402
from inferbook.model.rotary import length_dependent  # noqa: E402

pytestmark = pytest.mark.hf

PROMPTS = [[5, 17, 3, 99, 42, 8, 61], [7, 1], [120, 33, 33, 33]]
NEW_TOKENS = 8
PARITY = 1e-4          # logits agree with transformers' to this
MOVED = 1e-3           # ten times that: a feature switched off must move the logits further


def _moe(**changes):
    return lambda cfg: {"moe": dataclasses.replace(cfg.moe, **changes)}


# Per family, what switching each feature off means on the same weights.
FEATURE_OFF = {
    "llama3": {"llama3 rope scaling": {"rope_scaling": None}},
    "mistral": {"window": {"window": None}, "linear rope scaling": {"rope_scaling": None}},
    "qwen2": {"per-layer window": {"window": None, "layer_types": None},
              "yarn": {"rope_scaling": None}},
    "phi3": {"longrope": {"rope_scaling": None}},
    "gemma": {"√D embedding scale": {"embed_scale": False}},
    "gemma2": {"attention soft cap": {"attn_softcap": None},
               "final soft cap": {"final_softcap": None},
               "query_pre_attn_scalar": {"query_scale": None}},
    "mixtral": {"renormalised top-k": _moe(renormalize=False)},
    "qwen2_moe": {"raw top-k weights": _moe(renormalize=True)},
    "qwen3_moe": {"renormalised top-k": _moe(renormalize=False)},
    "deepseek_v2": {"group-limited routing": _moe(groups=1, topk_groups=1)},
    "deepseek_v3": {"group-limited routing": _moe(groups=1, topk_groups=1)},
    "gemma3": {"local rotary base": {"local_rope_theta": None}},
    "gemma3_text": {"local rotary base": {"local_rope_theta": None},
                    "global rope scaling": {"rope_scaling": None},
                    "query_pre_attn_scalar": {"query_scale": None},
                    "local window": {"window": 64}},
    "smollm3": {"NoPE layer": {"nope_layers": ()}, "window": {"window": 64}},
    "gpt_neox": {"partial rotary": {"rotary_fraction": 1.0},
                 "parallel branches": {"residual": "sequential"}},
    "stablelm": {"partial rotary": {"rotary_fraction": 1.0}},
    "granite": {"embedding multiplier": {"embed_multiplier": 1.0},
                "residual multiplier": {"residual_multiplier": 1.0},
                "attention multiplier": {"query_scale": None},
                "logits scaling": {"logit_multiplier": 1.0}},
    "cohere": {"interleaved rotary pairs": {"rope_interleaved": False},
               "logit scale": {"logit_multiplier": 1.0}},
    "olmoe": {"q/k/v clipping": {"qkv_clip": None}, "raw top-k weights": _moe(renormalize=True)},
    "starcoder2": {"window": {"window": None}},
    "phi": {"partial rotary": {"rotary_fraction": 1.0}},
}


def hf_greedy(hf, prompt, n):
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def cli_tokens(path, prompts, capsys, n=NEW_TOKENS, *extra):
    """`inferbook generate --checkpoint PATH --greedy --json --ignore-eos` on `prompts`: its
    tokens (every one of them, as transformers' reference runs with eos_token_id=None)."""
    argv = ["generate", "--checkpoint", str(path), "--greedy", "--json", "--ignore-eos",
            "--max-new-tokens", str(n), *extra]
    for prompt in prompts:
        argv += ["--prompt-ids", ",".join(map(str, prompt))]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)["tokens"]


def last_logits(params, cfg, batch):
    tokens, lengths = decode.pad_prompts(batch)
    logits = np.asarray(decoder.forward(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths)))
    return np.stack([logits[b, len(p) - 1] for b, p in enumerate(batch)])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_and_greedy_tokens_match_transformers(family, tmp_path, capsys):
    hf = build(family, tmp_path / family)
    cfg, params = load_checkpoint(tmp_path / family, dtype=jnp.float32)
    # A rotary rule that depends on the call's length sees the batch's longest prompt, in
    # transformers as here: batch only prompts past the original context (phi3's longrope).
    batch = [p for p in PROMPTS if not length_dependent(cfg)
             or len(p) > cfg.rope_scaling.original_max_len]
    assert len(batch) >= 2
    ours = last_logits(params, cfg, batch)
    for b, prompt in enumerate(batch):
        with torch.no_grad():
            theirs = hf(torch.tensor([prompt])).logits[0, -1].numpy()
        np.testing.assert_allclose(ours[b], theirs, atol=PARITY, rtol=0)
    expected = [hf_greedy(hf, prompt, NEW_TOKENS) for prompt in PROMPTS]
    alone = [cli_tokens(tmp_path / family, [p], capsys)[0] for p in PROMPTS]
    assert alone == expected
    assert cli_tokens(tmp_path / family, batch, capsys) == \
        [expected[PROMPTS.index(p)] for p in batch]
    for feature, off in FEATURE_OFF.get(family, {}).items():
        changes = off(cfg) if callable(off) else off
        moved = np.abs(last_logits(params, cfg.replace(**changes), batch) - ours).max()
        assert moved > MOVED, f"{family}: switching off {feature} changes nothing"


def test_every_band_of_the_llama3_rule_holds_pairs():
    """Llama-3's rule keeps the pairs whose wavelength is below L_orig / high_freq_factor,
    divides by `factor` those above L_orig / low_freq_factor and blends the rest: the test
    model has pairs in all three (computed here from its keys, not by the library)."""
    keys = FAMILIES["llama3"][2]["rope_scaling"]
    H = BASE["hidden_size"] // BASE["num_attention_heads"]
    wavelengths = [2 * math.pi * 10_000 ** (2 * i / H) for i in range(H // 2)]
    original = keys["original_max_position_embeddings"]
    high, low = original / keys["high_freq_factor"], original / keys["low_freq_factor"]
    kept = [w for w in wavelengths if w < high]
    scaled = [w for w in wavelengths if w > low]
    assert kept and scaled and len(kept) + len(scaled) < len(wavelengths)


def test_a_window_shorter_than_the_text_drops_the_oldest_tokens(tmp_path):
    """Mistral's window (4) is far shorter than prompt + generation (7 + 8): its greedy
    tokens without the window are not transformers'."""
    hf = build("mistral", tmp_path / "m")
    cfg, params = load_checkpoint(tmp_path / "m", dtype=jnp.float32)
    assert cfg.window == 4 < len(PROMPTS[0]) + NEW_TOKENS
    unwindowed = decode.generate(params, cfg.replace(window=None), [PROMPTS[0]], NEW_TOKENS)
    assert unwindowed.tokens[0] != hf_greedy(hf, PROMPTS[0], NEW_TOKENS)


def test_dynamic_rotary_scaling_alone(tmp_path):
    """Dynamic NTK scaling grows θ with the length of each call once it passes the trained
    context (8 here): the cache keeps keys rotated with the θ of their own step, as
    transformers' cache does. A fresh transformers model per call: its rotary module keeps
    the longest length it has seen."""
    fields = dict(max_position_embeddings=8, rope_scaling=dict(rope_type="dynamic", factor=2.0))
    prompt = [3, 9, 27, 81, 115, 89, 11, 33, 99, 41]
    build("llama3", tmp_path / "d", **fields)
    cfg, params = load_checkpoint(tmp_path / "d", dtype=jnp.float32)
    assert cfg.rope_scaling.kind == "dynamic"
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "d").eval()
    with torch.no_grad():
        theirs = hf(torch.tensor([prompt])).logits[0, -1].numpy()
    ours = decoder.forward(params, cfg, jnp.asarray([prompt]))[0, -1]
    np.testing.assert_allclose(np.asarray(ours), theirs, atol=PARITY, rtol=0)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "d").eval()
    assert decode.generate(params, cfg, [prompt], 6).tokens[0] == hf_greedy(hf, prompt, 6)


def test_the_command_line_splits_a_mixture_of_experts_over_its_experts(tmp_path, capsys):
    """`--mesh 1x2x2 --layout expert-parallel` on a Mixtral: two experts a chip, tokens sent to
    them, and still transformers' greedy tokens."""
    hf = build("mixtral", tmp_path / "mixtral", seed=1)
    tokens = cli_tokens(tmp_path / "mixtral", PROMPTS[:2], capsys, 6, "--mesh", "1x2x2",
                        "--layout", "expert-parallel")
    assert tokens == [hf_greedy(hf, prompt, 6) for prompt in PROMPTS[:2]]
def _rewrite(path, change):
    from inferbook.model.checkpoint import read_safetensors, write_safetensors
    tensors = {k: np.array(v) for k, v in read_safetensors(path / "model.safetensors").items()}
    change(tensors)
    write_safetensors(path / "model.safetensors", tensors)


def test_every_tensor_of_experts_and_latents_is_checked_by_name_and_shape(tmp_path):
    from inferbook.model.checkpoint import CheckpointError
    build("deepseek_v3", tmp_path / "d")
    expert = "model.layers.1.mlp.experts.3.up_proj.weight"
    original = np.array(load_checkpoint(tmp_path / "d")[1]["layers"][1]["we_up"][3]).T
    _rewrite(tmp_path / "d", lambda t: t.pop(expert) is None)
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.mlp\.experts\.3"):
        load_checkpoint(tmp_path / "d")
    _rewrite(tmp_path / "d", lambda t: t.update({expert: original[:, :-1]}))
    with pytest.raises(CheckpointError, match=r"experts\.3\.up_proj\.weight' has shape"):
        load_checkpoint(tmp_path / "d")
    _rewrite(tmp_path / "d", lambda t: t.update({
        expert: original, "model.layers.0.self_attn.kv_b_proj.weight": np.zeros((3, 16))}))
    with pytest.raises(CheckpointError, match=r"kv_b_proj\.weight' has shape \(3, 16\)"):
        load_checkpoint(tmp_path / "d")


def test_unused_tensors_are_refused_but_multi_token_prediction_layers_are_skipped(tmp_path):
    from inferbook.model.checkpoint import CheckpointError
    build("deepseek_v3", tmp_path / "d")
    _, params = load_checkpoint(tmp_path / "d")
    # DeepSeek-V3's checkpoints carry a layer past L for multi-token prediction.
    _rewrite(tmp_path / "d", lambda t: t.update({
        "model.layers.2.eh_proj.weight": np.zeros((64, 128), np.float32)}))
    _, again = load_checkpoint(tmp_path / "d")
    np.testing.assert_array_equal(again["layers"][1]["router_bias"],
                                  params["layers"][1]["router_bias"])
    _rewrite(tmp_path / "d", lambda t: t.update({
        "model.layers.1.mlp.experts.0.up_proj.bias": np.zeros((24,), np.float32)}))
    with pytest.raises(CheckpointError, match=r"does not use, e\.g\. 'model\.layers\.1\.mlp"):
        load_checkpoint(tmp_path / "d")


def test_gpt2_loads_without_the_transformer_prefix_and_with_stored_masks(tmp_path):
    """openai-community/gpt2's file names its tensors h.0.attn.c_attn.weight, ... (no
    "transformer." prefix) and keeps each layer's causal mask as h.{i}.attn.bias."""
    hf = build("gpt2", tmp_path / "g")

    def strip(t):
        renamed = {k.removeprefix("transformer."): v for k, v in t.items()}
        renamed |= {f"h.{i}.attn.bias": np.tril(np.ones((1, 1, 64, 64), np.float32))
                    for i in range(2)}
        t.clear()
        t.update(renamed)
    _rewrite(tmp_path / "g", strip)
    cfg, params = load_checkpoint(tmp_path / "g", dtype=jnp.float32)
    assert decode.generate(params, cfg, [PROMPTS[0]], 5).tokens[0] == \
        hf_greedy(hf, PROMPTS[0], 5)


def test_pythia_files_keep_causal_masks_that_the_loader_skips(tmp_path):
    """EleutherAI's Pythia files carry each layer's causal mask (attention.bias, a boolean
    [1, 1, 2048, 2048]) and masked_bias: buffers, not weights, skipped by name."""
    build("gpt_neox", tmp_path / "p")
    _, params = load_checkpoint(tmp_path / "p")
    _rewrite(tmp_path / "p", lambda t: t.update({
        **{f"gpt_neox.layers.{i}.attention.bias": np.tril(np.ones((1, 1, 8, 8), bool))
           for i in range(2)},
        **{f"gpt_neox.layers.{i}.attention.masked_bias": np.float32(-1e9) for i in range(2)}}))
    _, again = load_checkpoint(tmp_path / "p")
    np.testing.assert_array_equal(again["layers"][1]["wq"], params["layers"][1]["wq"])
    _rewrite(tmp_path / "p", lambda t: t.update({
        "gpt_neox.layers.1.attention.rotary.weight": np.zeros((4,), np.float32)}))
    from inferbook.model.checkpoint import CheckpointError
    with pytest.raises(CheckpointError, match="does not use"):
        load_checkpoint(tmp_path / "p")
