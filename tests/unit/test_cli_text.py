"""`inferbook generate` with text: prompts tokenized, chat templates applied, answers streamed
and stopped at the checkpoint's EOS ids — and every bad input refused in one line, exit 2.

A small checkpoint with random weights and a 272-token byte-level vocabulary (`gguf_files`),
as a GGUF file and as a Hugging Face directory; the library's own generation loop on the same
token ids is the reference for what the command prints.
"""

import json

import jax
import pytest
from cli_harness import refused, run_cli
from gguf_files import CHAT_TEMPLATE, VOCAB_SIZE, set_tensor_type, write_gguf

from inferbook.model import decode, decoder
from inferbook.model.checkpoint import save_checkpoint
from inferbook.model.config import ModelConfig
from inferbook.model.pretrained import load_pretrained
from inferbook.model.sampling import Sampler

CFG = ModelConfig(L=2, D=64, F=192, N=4, K=2, H=16, V=VOCAB_SIZE, max_seq_len=64,
                  name="cli-text")
LIMIT_S = 60.0          # a run that compiles; refusals keep the harness's 10 s


@pytest.fixture(scope="module")
def params():
    return decoder.init_params(CFG, seed=2)


@pytest.fixture(scope="module")
def gguf_path(params, tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("cli") / "tiny.gguf", CFG, params, "Q8_0")


@pytest.fixture(scope="module")
def hf_dir(gguf_path, params, tmp_path_factory):
    """The same model as a directory: weights, tokenizer.json, template, generation config."""
    d = tmp_path_factory.mktemp("cli") / "tiny-dir"
    model = load_pretrained(gguf_path)
    save_checkpoint(d, CFG, model.params)
    model.tokenizer.backend.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": list(model.eos_ids)}))
    return d


def generate_json(*argv):
    r = run_cli(["generate", *argv, "--json"], LIMIT_S)
    assert r.code == 0, r.describe()
    return json.loads(r.out)


def test_text_prompts_give_the_library_loops_tokens_and_their_text(gguf_path):
    out = generate_json("--checkpoint", gguf_path, "--prompt", "the cat", "--prompt",
                        "is Paris", "--max-new-tokens", "6", "--seed", "3",
                        "--temperature", "1.5")
    model = load_pretrained(gguf_path)
    ids = [model.prompt("the cat"), model.prompt("is Paris")]
    want = decode.generate(model.params, model.cfg, ids, 6, key=jax.random.key(3),
                           sampler=Sampler(1.5), eos_id=model.eos_ids).tokens
    assert out["tokens"] == want
    assert out["text"] == [model.decode(t) for t in want]
    assert out["ttft_s"] > 0 and out["device"]


def test_chat_prompts_go_through_the_template(gguf_path):
    out = generate_json("--checkpoint", gguf_path, "--chat", "--system", "Be brief.",
                        "--prompt", "hi", "--max-new-tokens", "4", "--ignore-eos")
    model = load_pretrained(gguf_path)
    ids = model.prompt("hi", chat=True, system="Be brief.")
    assert out["tokens"] == decode.generate(model.params, model.cfg, [ids], 4).tokens


def test_the_directory_and_the_gguf_file_agree(gguf_path, hf_dir):
    argv = ["--prompt", "the hat", "--chat", "--max-new-tokens", "5"]
    assert (generate_json("--checkpoint", gguf_path, *argv)["tokens"]
            == generate_json("--checkpoint", hf_dir, *argv)["tokens"])


def test_one_prompt_streams_exactly_its_text(gguf_path):
    argv = ["generate", "--checkpoint", gguf_path, "--prompt", "the", "--max-new-tokens", "8",
            "--ignore-eos"]
    r = run_cli(argv, LIMIT_S)
    assert r.code == 0, r.describe()
    assert r.out == generate_json(*argv[1:])["text"][0] + "\n"


def test_several_prompts_print_each_answer_under_its_prompt(gguf_path):
    argv = ["--checkpoint", gguf_path, "--prompt", "a", "--prompt", "b", "--max-new-tokens", "3"]
    r = run_cli(["generate", *argv], LIMIT_S)
    texts = generate_json(*argv)["text"]
    assert r.out == f"[1] a\n{texts[0]}\n\n[2] b\n{texts[1]}\n\n"


def test_eos_stops_and_ignore_eos_runs_on(gguf_path):
    free = generate_json("--checkpoint", gguf_path, "--prompt", "the", "--max-new-tokens", "8",
                         "--ignore-eos")["tokens"][0]
    assert len(free) == 8
    stopped = generate_json("--checkpoint", gguf_path, "--prompt", "the", "--max-new-tokens",
                            "8", "--eos-id", str(free[2]))["tokens"][0]
    assert stopped == free[:free.index(free[2]) + 1]


def test_weights_kept_quantized_give_the_same_tokens(gguf_path):
    argv = ["--checkpoint", gguf_path, "--prompt", "the cat", "--max-new-tokens", "6"]
    assert (generate_json(*argv, "--keep-quantized")["tokens"]
            == generate_json(*argv)["tokens"])


# Bad input: one line, exit 2 ----------------------------------------------------------------

def test_a_gguf_with_an_unknown_quantization_type_is_refused(gguf_path, tmp_path):
    bad = tmp_path / "unknown.gguf"
    bad.write_bytes(gguf_path.read_bytes())
    set_tensor_type(bad, "blk.0.attn_q.weight", 200)
    refused(["generate", "--checkpoint", bad, "--prompt", "hi"], "unknown quantization type")


@pytest.mark.parametrize("keep", [0.5, 0.98, 0.001])
def test_a_truncated_gguf_is_refused(gguf_path, tmp_path, keep):
    bad = tmp_path / "truncated.gguf"
    data = gguf_path.read_bytes()
    bad.write_bytes(data[:int(len(data) * keep)])
    refused(["generate", "--checkpoint", bad, "--prompt", "hi"], str(bad))


def test_a_type_that_cannot_stay_quantized_is_refused_only_when_kept(params, tmp_path):
    path = write_gguf(tmp_path / "q5.gguf", CFG, params, "Q5_0")
    refused(["generate", "--checkpoint", path, "--prompt", "hi", "--keep-quantized"], "Q5_0")
    r = run_cli(["generate", "--checkpoint", path, "--prompt", "hi", "--max-new-tokens", "2"],
                LIMIT_S)
    assert r.code == 0, r.describe()


def test_text_needs_a_tokenizer(hf_dir, tmp_path):
    bare = tmp_path / "bare"
    save_checkpoint(bare, CFG, decoder.init_params(CFG, seed=2))
    refused(["generate", "--checkpoint", bare, "--prompt", "hi"], "no tokenizer")
    refused(["generate", "--model", "tiny", "--prompt", "hi"], "--prompt-ids")


def test_a_tokenizer_that_does_not_fit_the_vocabulary_is_refused(hf_dir, tmp_path):
    small = CFG.replace(V=256)
    d = tmp_path / "mismatch"
    save_checkpoint(d, small, decoder.init_params(small, seed=2))
    (d / "tokenizer.json").write_bytes((hf_dir / "tokenizer.json").read_bytes())
    refused(["generate", "--checkpoint", d, "--prompt", "hi"], "272 tokens", "256")


def test_a_missing_or_broken_tokenizer_file_is_refused(hf_dir, tmp_path):
    d = tmp_path / "broken"
    save_checkpoint(d, CFG, decoder.init_params(CFG, seed=2))
    (d / "tokenizer.json").write_text("{not json")
    refused(["generate", "--checkpoint", d, "--prompt", "hi"], "tokenizer.json")


def test_a_prompt_longer_than_the_positions_is_refused(gguf_path):
    refused(["generate", "--checkpoint", gguf_path, "--prompt", "x" * 70], "positions")
    refused(["generate", "--checkpoint", gguf_path, "--prompt", "x" * 60, "--max-new-tokens",
             "10"], "positions")


@pytest.mark.parametrize("argv, fragment", [
    (["--prompt", "hi", "--system", "s"], "--system needs --chat"),
    (["--prompt-ids", "1,2", "--chat"], "--chat needs --prompt"),
    (["--prompt", ""], "prompt 1 is empty"),
    (["--prompt", "hi", "--eos-id", "300"], "outside the vocabulary"),
    (["--prompt", "hi", "--eos-id", "3", "--ignore-eos"], "not allowed with"),
])
def test_contradictory_text_options_are_refused(gguf_path, argv, fragment):
    refused(["generate", "--checkpoint", gguf_path, *argv], fragment)


def test_a_template_that_refuses_the_conversation_is_refused(params, tmp_path):
    template = "{{ raise_exception('this model takes no system prompt') }}"
    path = write_gguf(tmp_path / "strict.gguf", CFG, params, template=template)
    refused(["generate", "--checkpoint", path, "--prompt", "hi", "--chat"], "no system prompt")


def test_a_base_model_has_no_chat(params, tmp_path):
    path = write_gguf(tmp_path / "base.gguf", CFG, params, template=None)
    refused(["generate", "--checkpoint", path, "--prompt", "hi", "--chat"], "no chat template")


def test_checkpoints_that_are_not_there_are_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    refused(["generate", "--checkpoint", tmp_path / "nope.gguf", "--prompt", "hi"],
            "does not exist")
    refused(["generate", "--checkpoint", tmp_path / "notes.txt", "--prompt", "hi"],
            "neither a directory nor a .gguf file")
