"""What a checkpoint says about text: its tokenizer, its chat template, where it stops.

Both kinds of checkpoint carry the same three things, in different places:

  * the tokenizer — a directory's ``tokenizer.json`` (with ``tokenizer_config.json``: the
    special tokens, ``add_bos_token``); a GGUF file's ``tokenizer.ggml.*`` (`gguf_tokenizer`);
  * the chat template — ``chat_template.jinja``, ``chat_template.json`` or
    ``tokenizer_config.json``; a GGUF file's ``tokenizer.chat_template``;
  * the end-of-sequence ids — ``generation_config.json``, else ``config.json``
    (``eos_token_id``: an id or a list); a GGUF file's ``tokenizer.ggml.eos_token_id`` with
    the end-of-turn and end-of-message ids (``eot``, ``eom``) where it declares them.

`CheckpointText` gathers them. A checkpoint may have no tokenizer (only token ids can be
generated then) or no chat template (a base model: only plain prompts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferbook.model.tokenizer import TextTokenizer, TokenizerError

__all__ = ["CheckpointText", "text_from_dir", "text_from_gguf_metadata", "save_text"]


@dataclass(frozen=True)
class CheckpointText:
    """A checkpoint's tokenizer (None if it has none), chat template (None for a base model)
    and the end-of-sequence ids generation stops at (possibly several, possibly none)."""

    tokenizer: TextTokenizer | None
    chat_template: str | None
    eos_ids: tuple[int, ...]


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise TokenizerError(f"cannot read {path} as JSON: {str(err).splitlines()[0]}") from None
    if not isinstance(value, dict):
        raise TokenizerError(f"{path} does not hold a JSON object")
    return value


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: text, or {"content": text}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
        raise TokenizerError(f"{where}: eos_token_id must be a token id or a list of them, "
                             f"got {value!r}")
    return tuple(dict.fromkeys(items))


def _template(directory: Path, config: dict[str, Any]) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = _json(directory / "chat_template.json").get("chat_template",
                                                           config.get("chat_template"))
    if isinstance(template, list):           # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def text_from_dir(directory: str | Path) -> CheckpointText:
    """The tokenizer, chat template and EOS ids of a Hugging Face checkpoint directory."""
    from tokenizers import Tokenizer

    directory = Path(directory)
    config = _json(directory / "tokenizer_config.json")
    tokenizer = None
    if (directory / "tokenizer.json").is_file():
        try:
            backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as err:      # the Rust library raises its own Exception types
            raise TokenizerError(f"cannot read {directory / 'tokenizer.json'}: "
                                 f"{str(err).splitlines()[0] if str(err) else err}") from None
        names = ("bos_token", "eos_token", "unk_token", "pad_token")
        special = {n: t for n in names if (t := _token_text(config.get(n))) is not None}
        tokenizer = TextTokenizer(backend, special, config.get("add_bos_token") is True)
    eos: tuple[int, ...] = ()
    for name in ("generation_config.json", "config.json"):
        eos = _ids(_json(directory / name).get("eos_token_id"), str(directory / name))
        if eos:
            break
    if not eos and tokenizer is not None and "eos_token" in tokenizer.special_tokens:
        found = tokenizer.token_id(tokenizer.special_tokens["eos_token"])
        eos = () if found is None else (found,)
    return CheckpointText(tokenizer, _template(directory, config), eos)


def text_from_gguf_metadata(meta: dict[str, Any], eos_ids: tuple[int, ...]) -> CheckpointText:
    """The tokenizer and chat template a GGUF file's metadata describes (`eos_ids` from
    `gguf_reader.eos_ids_from_gguf`)."""
    from inferbook.model.gguf_tokenizer import tokenizer_from_gguf

    tokenizer = None
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens:
        special = {}
        for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                          ("pad_token", "padding")):
            i = meta.get(f"tokenizer.ggml.{key}_token_id")
            if i is not None and 0 <= int(i) < len(tokens):
                special[name] = tokens[int(i)]
        add_bos = meta.get("tokenizer.ggml.add_bos_token",
                           meta.get("tokenizer.ggml.model") == "llama")
        tokenizer = TextTokenizer(tokenizer_from_gguf(meta), special, bool(add_bos))
    template = meta.get("tokenizer.chat_template")
    return CheckpointText(tokenizer, template if isinstance(template, str) and template
                          else None, eos_ids)


def save_text(text: CheckpointText, directory: str | Path) -> None:
    """Write the text side as a Hugging Face directory holds it — tokenizer.json,
    tokenizer_config.json (special tokens, add_bos_token, chat template) and
    generation_config.json (EOS ids) — so that `text_from_dir` reads the same back."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {}
    if text.tokenizer is not None:
        text.tokenizer.backend.save(str(directory / "tokenizer.json"))
        config.update(text.tokenizer.special_tokens, add_bos_token=text.tokenizer.add_bos)
    if text.chat_template is not None:
        config["chat_template"] = text.chat_template
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    generation = _json(directory / "generation_config.json")
    generation["eos_token_id"] = list(text.eos_ids)
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=2))
