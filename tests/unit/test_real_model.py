"""The real model: SmolLM2-135M-Instruct from its pinned Q4_1 GGUF, against transformers.

transformers (with the `gguf` package) loads the same file, dequantized to float32, as the
independent reference (its tensors kept in the models' cache after the first read). The
library must give its greedy tokens on plain and chat prompts, its last-position logits, and
the same tokens again from a safetensors directory of those weights (written by
transformers), from the weights kept in their Q4_1 blocks, and through the command line. The
tokenizer rebuilt from the file must tokenize as transformers' does. `make` fetches the file
into the data cache (`model_store.fetch`); the fixture fetches it if it is missing.
"""

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest
from cli_harness import run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from inferbook.model import decode, kvcache  # noqa: E402
from inferbook.model.gguf_checkpoint import load_gguf_config  # noqa: E402
from inferbook.model.model_store import fetch, models_dir  # noqa: E402
from inferbook.model.presets import get_preset  # noqa: E402
from inferbook.model.pretrained import load_pretrained, open_pretrained  # noqa: E402
from inferbook.model.quantized import is_quantized  # noqa: E402
from inferbook.perf import quant  # noqa: E402

# One worker runs them all (`make test` distributes with --dist loadgroup): the module's
# fixtures — transformers' model and tokenizer, the library's model — are loaded once.
pytestmark = [pytest.mark.hf, pytest.mark.xdist_group("smollm2")]

NAME = "smollm2-135m-instruct"
PLAIN = ["The capital of France is", "Once upon a time, there was a little",
         "def fibonacci(n):\n    ", "Water boils at a temperature of"]
CHAT = ["What is the capital of France?", "Name three primary colors.",
        "Translate 'good morning' into Spanish.", "What is 2 + 3?"]
N_NEW = 8
CLI_LIMIT_S = 600.0


@pytest.fixture(scope="session")
def gguf_path():
    return fetch(NAME, progress=False)


@pytest.fixture(scope="session")
def gguf_tensors(gguf_path):
    """The file's tensors as the gguf package reads them (the reference for byte counts)."""
    import gguf
    return gguf.GGUFReader(str(gguf_path)).tensors


@pytest.fixture(scope="session")
def model(gguf_path):
    return load_pretrained(gguf_path)


@pytest.fixture(scope="session")
def reference(gguf_path):
    return transformers_reference(gguf_path).eval()


def transformers_reference(gguf_path):
    """transformers' float32 model of the GGUF file. The first time, transformers reads the
    file itself (the `gguf` package dequantizes it), and its state dict and config are kept,
    as save_pretrained writes them, in the models' cache under the file's SHA-256 and both
    packages' versions; later (the same suite under the other JAX version, the next run)
    transformers loads that copy. The weights are the same tensors either way; the copy
    saves reading the file's 49,152-token vocabulary, about half a minute each time."""
    key = "-".join((hashlib.sha256(gguf_path.read_bytes()).hexdigest()[:16],
                    transformers.__version__, importlib.metadata.version("gguf")))
    kept = models_dir() / "transformers-reference" / key
    if not (kept / "model.safetensors").is_file():
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
        kept.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=kept.parent))
        write_state(hf, staging)
        try:
            staging.rename(kept)                # whole or not at all; another writer may win
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
        return hf
    return transformers.AutoModelForCausalLM.from_pretrained(kept, dtype=torch.float32)


def write_state(hf, directory):
    """A model's state dict and config as save_pretrained writes them (a GGUF-loaded model
    refuses save_pretrained itself): the tied unembedding left out, no quantization entry."""
    from safetensors.torch import save_file
    state = {k: v.detach().contiguous().clone() for k, v in hf.state_dict().items()
             if not (k == "lm_head.weight" and hf.config.tie_word_embeddings)}
    save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    config = hf.config.to_dict()
    config.pop("quantization_config", None)
    (directory / "config.json").write_text(json.dumps(config))


@pytest.fixture(scope="session")
def prompts(model):
    return ([model.prompt(t) for t in PLAIN]
            + [model.prompt(q, chat=True) for q in CHAT])


@pytest.fixture(scope="session")
def our_tokens(model, prompts):
    return model.generate(prompts, N_NEW).tokens


def reference_tokens(hf, prompt):
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=N_NEW, do_sample=False)
    return out[0, len(prompt):].tolist()


def test_the_file_is_the_preset(model):
    assert model.cfg.replace(name=NAME) == get_preset(NAME)


def test_greedy_tokens_are_transformers_tokens(reference, prompts, our_tokens):
    assert our_tokens == [reference_tokens(reference, p) for p in prompts]


def last_logits(params, cfg, prompts):
    tokens_BT, lengths_B = decode.pad_prompts(prompts, 16)
    cache = kvcache.init_cache(cfg, len(prompts), tokens_BT.shape[1])
    return np.asarray(decode.prefill(params, cfg, tokens_BT, lengths_B, cache)[0])


@pytest.fixture(scope="session")
def our_logits(model, prompts):
    return last_logits(model.params, model.cfg, prompts)


def test_last_position_logits_are_close(reference, prompts, our_logits):
    ours = our_logits
    for b, prompt in enumerate(prompts):
        with torch.no_grad():
            want = reference(torch.tensor([prompt])).logits[0, -1].numpy()
        np.testing.assert_allclose(ours[b], want, rtol=0, atol=1e-3 * np.abs(want).max())


def test_the_chat_answers_the_question(model, our_tokens):
    assert "Paris" in model.decode(our_tokens[len(PLAIN)])


def test_a_safetensors_directory_of_the_same_weights_gives_the_same_tokens(
        reference, model, prompts, our_tokens, tmp_path):
    write_state(reference, tmp_path)                    # transformers' names and layout
    model.save_text(tmp_path)                           # tokenizer, template, EOS ids
    from_dir = load_pretrained(tmp_path)
    assert from_dir.prompt(CHAT[0], chat=True) == prompts[len(PLAIN)]
    assert from_dir.eos_ids == model.eos_ids
    # The same config (the directory's name aside), so the compiled programs are reused.
    # transformers writes the file's float32 epsilon (9.99999975e-06); the library reads the
    # decimal it was converted from (1e-05).
    assert from_dir.cfg.norm_eps == pytest.approx(model.cfg.norm_eps, rel=1e-7)
    assert from_dir.cfg.replace(name=model.cfg.name, norm_eps=model.cfg.norm_eps) == model.cfg
    assert decode.generate(from_dir.params, model.cfg, prompts, N_NEW,
                           eos_id=model.eos_ids).tokens == our_tokens
    r = run_cli(["generate", "--checkpoint", tmp_path, "--chat", "--prompt", CHAT[0]],
                CLI_LIMIT_S)
    assert r.code == 0 and "Paris" in r.out, r.describe()


def test_weights_kept_in_their_blocks_compute_the_same_and_hold_the_files_bytes(
        gguf_path, gguf_tensors, prompts, our_logits):
    kept = load_pretrained(gguf_path, keep_quantized=True)
    logits = last_logits(kept.params, kept.cfg, prompts)
    np.testing.assert_allclose(logits, our_logits, rtol=0, atol=1e-4 * np.abs(our_logits).max())
    assert (logits.argmax(-1) == our_logits.argmax(-1)).all()
    held = sum(w.nbytes for w in jax.tree.leaves(kept.params, is_leaf=is_quantized)
               if is_quantized(w))
    quantized = sum(t.n_bytes for t in gguf_tensors if t.tensor_type.name != "F32")
    assert held == quantized


def test_the_estimators_int4_with_minimums_counts_the_files_q4_1_bytes(gguf_path, gguf_tensors):
    """`--weights int4+min:32` (4-bit codes, a 16-bit scale and a 16-bit minimum per 32
    weights) is how llama.cpp's Q4_1 stores this file's layer matrices: the estimator counts
    their bytes to the byte; the symmetric int4:32 counts 18 bytes a block where Q4_1 has 20."""
    cfg = load_gguf_config(gguf_path)[1]
    q4_1 = sum(int(t.n_bytes) for t in gguf_tensors if t.tensor_type.name == "Q4_1")
    assert q4_1 > 0
    assert quant.weight_bytes(cfg, "int4+min:32", roles=("matrix",)) == q4_1
    assert quant.weight_bytes(cfg, "int4:32", roles=("matrix",)) == q4_1 * 18 / 20


@pytest.mark.parametrize("source", [["--model", NAME],
                                    ["--checkpoint", "GGUF", "--keep-quantized"]])
def test_the_command_line_answers_in_text(source, gguf_path):
    source = [str(gguf_path) if s == "GGUF" else s for s in source]
    r = run_cli(["generate", *source, "--chat", "--prompt", "What is the capital of France?"],
                CLI_LIMIT_S)
    assert r.code == 0 and "Paris" in r.out and r.err == "", r.describe()


# The tokenizer ----------------------------------------------------------------------------

TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.",
         "  leading spaces and trailing  ", "tabs\tand\nnewlines\n\n", "héllo wörld, ça va?",
         "日本語のテキスト", "emoji 😀👍🏽", "def f(x):\n    return x ** 2  # square",
         "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n",
         "In 1969, 3 astronauts flew 384400 km.", "don't won't I'll we're"]


@pytest.fixture(scope="session")
def reference_tokenizer(gguf_path):
    return transformers.AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)


@pytest.fixture(scope="session")
def spec(gguf_path):
    return open_pretrained(gguf_path)


@pytest.mark.parametrize("text", TEXTS)
def test_the_tokenizer_tokenizes_as_transformers_does(spec, reference_tokenizer, text):
    ours = spec.tokenizer.encode(text)
    assert ours == reference_tokenizer(text)["input_ids"]
    assert spec.tokenizer.decode(ours, skip_special=False) == text


def test_the_chat_template_renders_as_transformers_renders_it(spec, reference_tokenizer):
    for system in (None, "You answer in one word."):
        messages = ([] if system is None else [{"role": "system", "content": system}]) + [
            {"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": CHAT[0]}]
        want = reference_tokenizer.apply_chat_template(messages, tokenize=False,
                                                        add_generation_prompt=True)
        assert spec.chat_text(messages) == want
        assert spec.tokenizer.encode(want, special=False) == reference_tokenizer(
            want, add_special_tokens=False)["input_ids"]


def test_digits_are_split_one_by_one_as_llama_cpp_splits_them(spec):
    """The file's pre-tokenizer is "smollm": llama.cpp (and the model's own tokenizer.json)
    cut every digit off before the merges. transformers' GGUF converter does not know that
    name and falls back to GPT-2's expression, which differs on a digit after two spaces; the
    library follows llama.cpp."""
    tok = spec.tokenizer
    for text in ["a  1", "year 2024", "x12y", "3.14159"]:
        pieces = [tok.decode([i]) for i in tok.encode(text)]
        assert "".join(pieces) == text
        assert all(len(p.strip()) == 1 for p in pieces if any(c.isdigit() for c in p)), pieces
