"""A real model in one call: weights, config, tokenizer, chat template and stopping ids.

    model = load_pretrained("smollm2-135m-instruct")          # or a directory, a .gguf file,
    ids = model.prompt("What is the capital of France?", chat=True)     # or "hf:ORG/NAME"
    out = model.generate([ids], max_new_tokens=32)
    print(out.text[0])                                         # "The capital of France is Paris."

`load_pretrained` finds the checkpoint (`model_store.resolve`: the cached GGUF here, the
Hugging Face hub in Colab), reads its config, weights (`checkpoint.load_checkpoint` for a
directory, `gguf_checkpoint.load_gguf` for a GGUF file, dequantized to `dtype` or kept in
their quantized blocks) and what it says about text (`checkpoint_text`). `open_pretrained`
does everything but the weights — enough to tokenize prompts and check them against the
model before paying for the load.

`Pretrained.generate` runs the library's decoding loop (`decode.generate`) on token ids, stops
each sequence at any of the checkpoint's end-of-sequence ids, and streams text through
`on_text(b, piece)` as tokens arrive. Its result holds the new tokens, their text, and the
time to the first token and the decoding rate (wall clock, compilation included on a first
call: warm up once before timing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from inferbook.model.chat import chat_messages, render_chat
from inferbook.model.checkpoint_text import (
    CheckpointText,
    save_text,
    text_from_dir,
    text_from_gguf_metadata,
)
from inferbook.model.config import ModelConfig
from inferbook.model.model_store import PRETRAINED, resolve
from inferbook.model.tokenizer import TextTokenizer, TokenizerError

__all__ = ["Pretrained", "PretrainedSpec", "TextGeneration", "open_pretrained",
           "load_pretrained", "prompt_ids", "chat_text"]


@dataclass
class TextGeneration:
    """What `Pretrained.generate` produced: new tokens and their text per prompt, the seconds
    to the first token (prefill and one sample), and the seconds of the decode steps after
    it (`tokens_per_s` divides the later tokens by them)."""

    tokens: list[list[int]]
    text: list[str]
    ttft_s: float
    decode_s: float

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens per second of the decode steps, summed over the batch (None if none ran)."""
        later = sum(max(len(t) - 1, 0) for t in self.tokens)
        return later / self.decode_s if later and self.decode_s > 0 else None


def _tokenizer(text: CheckpointText, path: Path) -> TextTokenizer:
    if text.tokenizer is None:
        raise TokenizerError(f"{path} has no tokenizer (tokenizer.json): give token ids "
                             "instead of text")
    return text.tokenizer


def chat_text(text: CheckpointText, path: Path, messages: Sequence[dict[str, Any]]) -> str:
    """A conversation rendered by the checkpoint's chat template, ready for the answer."""
    if text.chat_template is None:
        raise TokenizerError(f"{path} has no chat template (a base model?): use plain prompts")
    special = text.tokenizer.special_tokens if text.tokenizer is not None else {}
    return render_chat(text.chat_template, messages, special_tokens=special)


def prompt_ids(text: CheckpointText, path: Path, prompt: str, *, chat: bool = False,
               system: str | None = None) -> list[int]:
    """The token ids of a prompt: plain text, or (`chat`) one user turn after an optional
    `system` prompt, rendered by the chat template (whose text holds its own special tokens,
    so none are added: as transformers' `apply_chat_template` encodes it)."""
    tokenizer = _tokenizer(text, path)
    if not chat:
        if system is not None:
            raise TokenizerError("a system prompt goes through the chat template: add --chat "
                                 "(chat=True)")
        return tokenizer.encode(prompt)
    return tokenizer.encode(chat_text(text, path, chat_messages(prompt, system)),
                            special=False)


class _TextSide:
    """Tokenizing and chat templates, for a checkpoint opened with or without its weights."""

    text: CheckpointText
    path: Path

    @property
    def tokenizer(self) -> TextTokenizer | None:
        return self.text.tokenizer

    @property
    def chat_template(self) -> str | None:
        return self.text.chat_template

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return self.text.eos_ids

    def prompt(self, prompt: str, *, chat: bool = False, system: str | None = None
               ) -> list[int]:
        """Token ids of a prompt (see `prompt_ids`)."""
        return prompt_ids(self.text, self.path, prompt, chat=chat, system=system)

    def chat_text(self, messages: Sequence[dict[str, Any]]) -> str:
        """A conversation rendered by the checkpoint's chat template."""
        return chat_text(self.text, self.path, messages)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids, special tokens left out."""
        return _tokenizer(self.text, self.path).decode(ids)


@dataclass
class PretrainedSpec(_TextSide):
    """A checkpoint opened without its weights: where it is, its config, what it says about
    text; `load` reads the weights (`gguf` keeps an opened GGUF file for that)."""

    path: Path
    cfg: ModelConfig
    text: CheckpointText
    gguf: Any = None

    def load(self, dtype: Any = None, keep_quantized: bool = False) -> "Pretrained":
        from inferbook.model.checkpoint import load_checkpoint
        from inferbook.model.gguf_checkpoint import gguf_params
        if self.gguf is not None:
            params = gguf_params(self.gguf, self.cfg, dtype, keep_quantized)
        else:
            if keep_quantized:
                raise TokenizerError(f"{self.path}: only GGUF files hold quantized weights "
                                     "to keep")
            params = load_checkpoint(self.path, dtype=dtype)[1]
        return Pretrained(self.cfg, params, self.text, self.path)


def open_pretrained(spec: str | Path, source: str | None = None) -> PretrainedSpec:
    """Resolve `spec` and read everything but the weights (see `model_store.resolve`)."""
    path = resolve(str(spec), source)
    if path.is_file():
        from inferbook.model.gguf_checkpoint import load_gguf_config
        gf, cfg, eos = load_gguf_config(path)
        text = text_from_gguf_metadata(gf.metadata, eos)
    else:
        from inferbook.model.checkpoint import read_checkpoint_config
        cfg = read_checkpoint_config(path)
        gf, text = None, text_from_dir(path)
    if str(spec) in PRETRAINED:             # the preset's name, whatever the file is called
        cfg = cfg.replace(name=str(spec))
    if text.tokenizer is not None:
        text.tokenizer.check_vocabulary(cfg.V, f"{path.name} (V = {cfg.V})")
    bad = [e for e in text.eos_ids if not 0 <= e < cfg.V]
    if bad:
        raise TokenizerError(f"{path}: end-of-sequence id {bad[0]} is outside the vocabulary "
                             f"[0, {cfg.V})")
    return PretrainedSpec(path, cfg, text, gf)


def load_pretrained(spec: str | Path, dtype: Any = None, keep_quantized: bool = False,
                    source: str | None = None) -> "Pretrained":
    """A pretrained model ready to generate: a name of `model_store.PRETRAINED`, a checkpoint
    directory, a .gguf file or "hf:ORG/NAME". `dtype` (default float32) is the weights'
    compute type; `keep_quantized` keeps a GGUF file's quantized matrices in their blocks."""
    return open_pretrained(spec, source).load(dtype, keep_quantized)


@dataclass
class Pretrained(_TextSide):
    """A loaded model: config, params, and its text side (tokenizer, chat template, EOS ids),
    with `prompt`, `chat_text`, `decode` and `generate`."""

    cfg: ModelConfig
    params: Any
    text: CheckpointText
    path: Path

    def save_text(self, directory: str | Path) -> None:
        """Write tokenizer.json, tokenizer_config.json and generation_config.json
        (`checkpoint_text.save_text`) beside a directory's weights."""
        save_text(self.text, directory)

    def save(self, directory: str | Path) -> Path:
        """The model as a Hugging Face checkpoint directory — config.json and
        model.safetensors (`checkpoint.save_checkpoint`; weights dequantized) with its text
        side — which `load_pretrained(directory)` reads back."""
        import jax

        from inferbook.model.checkpoint import save_checkpoint
        from inferbook.model.quantized import is_quantized
        dense = jax.tree.map(lambda w: w.dequantize() if is_quantized(w) else w, self.params,
                             is_leaf=is_quantized)
        save_checkpoint(directory, self.cfg, dense)
        self.save_text(directory)
        return Path(directory)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
                 sampler: Any = None, key: Any = None, stop_at_eos: bool = True,
                 eos_ids: Sequence[int] | None = None,
                 on_text: Callable[[int, str], None] | None = None) -> TextGeneration:
        """New tokens after each prompt (token ids, e.g. from `prompt`), with their text.

        Stops each sequence at the checkpoint's EOS ids (`eos_ids` overrides them;
        `stop_at_eos=False` runs all `max_new_tokens`, for measurements). `on_text(b, piece)`
        receives prompt b's text as it is generated."""
        from inferbook.model.decode import generate
        from inferbook.model.sampling import GREEDY
        eos = tuple(self.eos_ids if eos_ids is None else eos_ids) if stop_at_eos else ()
        streams = ([_tokenizer(self.text, self.path).stream() for _ in prompts]
                   if on_text is not None else None)
        finished = [False] * len(prompts)
        times: list[float] = []

        def on_step(step: int, tokens_B: Any) -> None:
            times.append(time.perf_counter())
            for b, t in enumerate(tokens_B.tolist()):
                if streams is not None and not finished[b]:
                    piece = streams[b].push([t])
                    if piece:
                        on_text(b, piece)
                finished[b] = finished[b] or t in eos

        start = time.perf_counter()
        result = generate(self.params, self.cfg, prompts, max_new_tokens,
                          sampler=sampler or GREEDY, key=key, eos_id=eos or None,
                          on_step=on_step)
        for b, s in enumerate(streams or []):
            rest = s.flush()
            if rest:
                on_text(b, rest)
        text = [self.decode(t) for t in result.tokens] if self.tokenizer else []
        return TextGeneration(result.tokens, text, times[0] - start, times[-1] - times[0])
