"""Text in and out of a checkpoint: tokenizers, chat templates and stopping ids, as a
Hugging Face directory and a GGUF file declare them, checked against transformers.

The checkpoints are small: a byte-level BPE vocabulary of 272 tokens (`gguf_files`), a
SentencePiece one built here, random weights. The real model's tokenizer is tested in
test_real_model.py.
"""

import json

import numpy as np
import pytest
from gguf_files import CHAT_TEMPLATE, VOCAB_SIZE, vocabulary, write_gguf

from inferbook.model import decoder
from inferbook.model.chat import ChatTemplateError, chat_messages, render_chat
from inferbook.model.checkpoint import save_checkpoint
from inferbook.model.checkpoint_text import text_from_dir
from inferbook.model.config import ModelConfig
from inferbook.model.pretrained import open_pretrained

CFG = ModelConfig(L=2, D=64, F=192, N=4, K=2, H=16, V=VOCAB_SIZE, max_seq_len=64,
                  name="text-test")
TEXTS = ["the cat is in Paris", "Hello, world!\n\tTabs  and   spaces ", "héllo wörld — ünïcode",
         "日本語のテキスト", "emoji 😀👍🏽 mixed", "x = f(y) + 2 * 3; // code", "",
         "<|im_start|>user\nhi<|im_end|>\n"]


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory):
    params = decoder.init_params(CFG, seed=1)
    return write_gguf(tmp_path_factory.mktemp("t") / "tiny.gguf", CFG, params)


@pytest.fixture(scope="module")
def spec(gguf_path):
    return open_pretrained(gguf_path)


@pytest.mark.parametrize("text", TEXTS)
def test_decoding_gives_back_the_text(spec, text):
    tok = spec.tokenizer
    assert tok.decode(tok.encode(text), skip_special=False) == text


def test_control_tokens_are_matched_whole_and_skipped_in_display(spec):
    tokens, _ = vocabulary()
    ids = spec.tokenizer.encode("<|im_start|>user\nthe<|im_end|>")
    assert ids[0] == tokens.index("<|im_start|>") and ids[-1] == tokens.index("<|im_end|>")
    assert spec.tokenizer.decode(ids) == "user\nthe"


def test_merges_apply(spec):
    tokens, _ = vocabulary()
    assert spec.tokenizer.encode(" the Paris") == [tokens.index("Ġthe"), tokens.index("ĠParis")]


@pytest.mark.parametrize("text", TEXTS[:6])
def test_streamed_text_is_the_decoded_text_in_whole_characters(spec, text):
    ids = spec.tokenizer.encode(text)
    stream = spec.tokenizer.stream()
    pieces = [stream.push([i]) for i in ids] + [stream.flush()]
    assert "".join(pieces) == spec.tokenizer.decode(ids)
    assert not any("\ufffd" in p for p in pieces)


def test_the_gguf_declares_its_eos_and_template(spec):
    tokens, _ = vocabulary()
    assert spec.eos_ids == (tokens.index("<|im_end|>"),)
    assert spec.chat_template == CHAT_TEMPLATE
    assert spec.cfg.replace(name=CFG.name) == CFG


def test_a_chat_prompt_is_the_template_encoded_without_extra_tokens(spec):
    ids = spec.prompt("hi", chat=True, system="Be brief.")
    want = render_chat(CHAT_TEMPLATE, chat_messages("hi", "Be brief."))
    assert spec.tokenizer.decode(ids, skip_special=False) == want


def test_a_directory_declares_the_same(spec, tmp_path):
    """tokenizer.json, tokenizer_config.json (special tokens, chat template) and
    generation_config.json (a list of EOS ids): the directory's text side."""
    save_checkpoint(tmp_path, CFG, decoder.init_params(CFG, seed=1))
    spec.tokenizer.backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"},
         "add_bos_token": True, "chat_template": CHAT_TEMPLATE}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    text = text_from_dir(tmp_path)
    assert text.eos_ids == (2, 0) and text.chat_template == CHAT_TEMPLATE
    assert text.tokenizer.encode("the cat") == [1] + spec.tokenizer.encode("the cat")
    assert text.tokenizer.encode("the cat", special=False) == spec.tokenizer.encode("the cat")


def test_a_template_in_its_own_file_wins(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "other"}))
    assert text_from_dir(tmp_path).chat_template == "{{ messages[0]['content'] }}!"


# Chat templates against transformers' apply_chat_template ---------------------------------

TEMPLATES = {
    "chatml": CHAT_TEMPLATE,
    "system-default": ("{% if messages[0]['role'] != 'system' %}{{ bos_token }}[default]\n"
                       "{% endif %}{% for m in messages %}{{ m['role'] | upper }}: "
                       "{{ m['content'] | trim }}{{ eos_token }}\n{% endfor %}"
                       "{% if add_generation_prompt %}ASSISTANT:{% endif %}"),
    "json-and-loops": ("{% for m in messages %}{% if m['role'] == 'system' %}{% continue %}"
                       "{% endif %}{{ m | tojson }}\n{% if loop.index > 3 %}{% break %}{% endif %}"
                       "{% endfor %}{{ 'é<>&' | tojson }}"),
    "namespace": ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                  "{% endfor %}{{ ns.n }} turns{% generation %} go{% endgeneration %}"),
}
CONVERSATIONS = [chat_messages("What is the capital of France?"),
                 chat_messages("  Bonjour à tous <b>!</b>  ", "Réponds en français."),
                 [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                  {"role": "user", "content": "c"}]]


@pytest.mark.hf
@pytest.mark.parametrize("name", TEMPLATES)
def test_templates_render_as_transformers_renders_them(spec, name):
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=spec.tokenizer.backend,
                                              bos_token="<|im_start|>", eos_token="<|im_end|>")
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            want = hf.apply_chat_template(messages, chat_template=TEMPLATES[name],
                                          tokenize=False, add_generation_prompt=prompt)
            assert render_chat(TEMPLATES[name], messages, add_generation_prompt=prompt,
                               special_tokens={"bos_token": "<|im_start|>",
                                               "eos_token": "<|im_end|>"}) == want


def test_a_template_that_refuses_says_why():
    template = ("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system!') }}"
                "{% endif %}")
    with pytest.raises(ChatTemplateError, match="no system!"):
        render_chat(template, chat_messages("hi", "sys"))
    assert render_chat(template, chat_messages("hi")) == ""


# SentencePiece vocabularies --------------------------------------------------------------

def sentencepiece_gguf(path):
    """A tiny Llama-style vocabulary: <unk> <s> </s>, byte fallbacks, pieces with scores."""
    import gguf
    pieces = ["▁", "e", "t", "h", "a", "s", "i", "n", "▁t", "he", "▁the", "▁a", "in", "▁in",
              "s▁", "is", "▁is", "▁hi", "hi", "at", "▁at"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_tensor("dummy", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return gguf.GGUFReader(str(path))


@pytest.mark.hf
def test_a_sentencepiece_vocabulary_tokenizes_as_transformers_does(tmp_path):
    transformers = pytest.importorskip("transformers")
    from inferbook.model.checkpoint_text import text_from_gguf_metadata
    reader = sentencepiece_gguf(tmp_path / "spm.gguf")
    meta = {name: f.contents() for name, f in reader.fields.items()}
    ours = text_from_gguf_metadata(meta, (2,)).tokenizer
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file="spm.gguf")
    for text in ["the hat is in the hat", "this is at the inn", "héllo 😀 x\ny", " a  the",
                 "that"]:
        assert ours.encode(text) == hf(text)["input_ids"], text
        assert ours.decode(ours.encode(text)) == hf.decode(hf(text)["input_ids"],
                                                           skip_special_tokens=True)


@pytest.mark.hf
@pytest.mark.parametrize("post_processor", [False, True])
def test_a_directory_tokenizes_as_transformers_autotokenizer_does(spec, tmp_path,
                                                                  post_processor):
    """A tokenizer.json whose post-processor puts BOS first (as Llama 3's does), or none."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import processors
    backend = spec.tokenizer.backend
    if post_processor:
        backend = type(backend).from_str(backend.to_str())
        backend.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", special_tokens=[("<|im_start|>", 1)])
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE,
         "tokenizer_class": "PreTrainedTokenizerFast"}))
    ours = text_from_dir(tmp_path).tokenizer
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS[:6]:
        assert ours.encode(text) == hf(text)["input_ids"], text
    conversation = chat_messages("the cat", "Be brief.")
    rendered = render_chat(CHAT_TEMPLATE, conversation)
    assert ours.encode(rendered, special=False) == hf.apply_chat_template(
        conversation, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
