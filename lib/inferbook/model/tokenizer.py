"""Text to token ids and back: a checkpoint's tokenizer, its special tokens, streamed decoding.

The tokenizing itself is Hugging Face's `tokenizers` library, from a checkpoint directory's
``tokenizer.json`` or rebuilt from a GGUF file's metadata (`gguf_tokenizer`). `TextTokenizer`
adds what a generation loop needs around it:

  * `encode(text)` — ids of a plain prompt, with the beginning-of-sequence token where the
    model wants one (``add_bos_token``); `encode(text, special=False)` for text that already
    holds its special tokens, such as a rendered chat template (as transformers'
    `apply_chat_template` encodes it);
  * `decode(ids)` — text, special tokens left out;
  * `stream()` — a `TextStream` that turns ids arriving one at a time into text as soon as it
    is complete: a character split over two byte-level tokens prints when its last byte
    arrives, never as "�";
  * the special tokens by name (``bos_token``, ``eos_token``, ...), for chat templates.

`check_vocabulary(V)` refuses a tokenizer whose ids do not fit the model's embedding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from tokenizers import Tokenizer

from inferbook.model.safetensors_io import CheckpointError

__all__ = ["TextTokenizer", "TextStream", "TokenizerError"]


class TokenizerError(CheckpointError):
    """A tokenizer that is missing, unreadable, or does not fit the model."""


@dataclass
class TextTokenizer:
    """A `tokenizers.Tokenizer` with the special tokens a checkpoint declares.

    `special_tokens` maps transformers' names (bos_token, eos_token, unk_token, pad_token) to
    their text; `add_bos` says whether `encode` puts the BOS token first.
    """

    backend: Tokenizer
    special_tokens: dict[str, str] = field(default_factory=dict)
    add_bos: bool = False

    @property
    def bos_id(self) -> int | None:
        text = self.special_tokens.get("bos_token")
        return None if text is None else self.backend.token_to_id(text)

    def token_id(self, text: str) -> int | None:
        """The id of a token given by its text (a special token's, usually)."""
        return self.backend.token_to_id(text)

    @property
    def vocab_size(self) -> int:
        """One more than the largest id the tokenizer produces (added tokens included)."""
        ids = self.backend.get_vocab(with_added_tokens=True).values()
        return max(ids) + 1 if ids else 0

    def encode(self, text: str, special: bool = True) -> list[int]:
        """Token ids of `text`. `special`: the text is a plain prompt, so put the BOS token
        first where the model wants one; False for text that holds its own special tokens."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a string, got {type(text).__name__}")
        # With `special`, the tokenizer's own post-processor (a tokenizer.json may carry one
        # that puts BOS first, as Llama 3's does) runs as in transformers' `tokenizer(text)`.
        ids = self.backend.encode(text, add_special_tokens=special).ids
        bos = self.bos_id
        if special and self.add_bos and bos is not None and ids[:1] != [bos]:
            ids = [bos] + ids
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """The text of `ids`; special tokens (BOS, EOS, chat markers) left out by default."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def stream(self, skip_special: bool = True) -> "TextStream":
        """A decoder for ids that arrive one at a time (`TextStream.push`)."""
        return TextStream(self, skip_special)

    def check_vocabulary(self, V: int, where: str = "the model") -> None:
        """Refuse a tokenizer that produces ids the model's embedding [V, D] has no row for."""
        if self.vocab_size > V:
            raise TokenizerError(f"the tokenizer has {self.vocab_size} tokens but {where} "
                                 f"embeds only {V}: they do not belong together")


class TextStream:
    """Text of a growing sequence of ids, handed out as it becomes final.

    `push(ids)` returns the text the new ids complete. Decoding token by token would split
    characters whose bytes straddle two tokens, and would lose the spaces some decoders add
    between tokens; instead the whole sequence is decoded, and what follows the text already
    handed out is released — except a trailing "�", the mark of an unfinished character.
    """

    def __init__(self, tokenizer: TextTokenizer, skip_special: bool = True):
        self.tokenizer, self.skip_special = tokenizer, skip_special
        self.ids: list[int] = []
        self.text = ""                          # what has been handed out

    def push(self, ids: Iterable[int]) -> str:
        self.ids.extend(int(i) for i in ids)
        full = self.tokenizer.decode(self.ids, self.skip_special)
        if full.endswith("\ufffd") or not full.startswith(self.text):
            return ""                           # wait for the rest of the character
        new, self.text = full[len(self.text):], full
        return new

    def flush(self) -> str:
        """Whatever is left, unfinished characters included (at the end of generation)."""
        full = self.tokenizer.decode(self.ids, self.skip_special)
        new = full[len(self.text):] if full.startswith(self.text) else ""
        self.text = full
        return new
