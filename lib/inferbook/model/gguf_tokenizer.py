"""A Hugging Face `tokenizers.Tokenizer` rebuilt from a GGUF file's ``tokenizer.ggml.*`` keys.

A GGUF file has no tokenizer.json; it stores what one is made of: the tokens in id order, each
token's type (normal, control, user-defined, byte, ...), the BPE merges or, for SentencePiece
vocabularies, a score per token, and the name of the pre-tokenizer — the regular expressions
that cut text into words before the merges apply (``tokenizer.ggml.pre``). Two kinds of model
are rebuilt here with the `tokenizers` library, which then does all the tokenizing:

  * ``gpt2`` — byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM): every byte of the text has a
    printable stand-in character, and the file's merges join them. The pre-tokenizer is
    chosen by ``tokenizer.ggml.pre`` as llama.cpp chooses it (llama-vocab.cpp): SmolLM and
    StarCoder split every digit off first, Llama 3 and Qwen2 have their own expressions.
  * ``llama`` — SentencePiece BPE (Llama 1–2, Mistral, TinyLlama): spaces become "▁", one is
    put in front of the text, and bytes with no token of their own fall back to <0xXX>
    tokens. The file gives scores, not merges; the merges are the scores' order: a pair of
    tokens merges before another if the token it makes scores higher.

Control tokens (``<|im_start|>``, ``</s>``) are added as special tokens, so they are matched
whole in the text (a chat template writes them) and skipped when decoding for display.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from inferbook.model.safetensors_io import CheckpointError

__all__ = ["tokenizer_from_gguf", "TOKEN_NORMAL", "TOKEN_CONTROL", "TOKEN_USER", "PRE_SPLITS"]

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# tokenizer.ggml.pre -> the expressions applied in turn (llama.cpp's llama-vocab.cpp groups).
PRE_SPLITS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("default", "gpt2", "gpt-2", "mpt", "olmo", "jais"), (_GPT2,)),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone",
                     "minerva"), (r"\p{N}", _GPT2)),
    **dict.fromkeys(("llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx"),
                    (_LLAMA3,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), (_QWEN2,)),
}
# Pre-tokenizers whose vocabulary takes a whole word from the vocabulary before any merge.
_IGNORE_MERGES = {"llama-bpe", "llama3", "llama-v3", "falcon3", "smaug-bpe", "dbrx"}


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves,
    the others (controls, space, ...) are shifted to code points from 256 up."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    out, shift = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + shift)
            shift += 1
    return out


def _byte_level(meta: dict[str, Any], tokens: list[str], types: list[int]) -> Tokenizer:
    pre = meta.get("tokenizer.ggml.pre") or "default"
    if pre not in PRE_SPLITS:
        raise CheckpointError(f"GGUF pre-tokenizer {pre!r} is not supported; supported: "
                              f"{', '.join(sorted(PRE_SPLITS))}")
    alphabet = _byte_alphabet()
    letters = set(alphabet.values())
    vocab = {}
    for i, (tok, kind) in enumerate(zip(tokens, types)):
        # A normal token spelled in raw text (some converters write it so) is respelled in
        # the byte alphabet; control and user-defined tokens keep their text, matched whole.
        if kind in (TOKEN_NORMAL, TOKEN_UNUSED) and not set(tok) <= letters:
            tok = "".join(alphabet[b] for b in tok.encode("utf-8"))
        vocab.setdefault(tok, i)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tk = Tokenizer(models.BPE(vocab, merges, ignore_merges=pre in _IGNORE_MERGES))
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_SPLITS[pre]]
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    return tk


def _merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece's merge order: every way to cut a token into two tokens of the
    vocabulary is a merge, ranked by the score of the token it makes (highest first)."""
    ids = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for tok, score in zip(tokens, scores):
        for cut in range(1, len(tok)):
            left, right = tok[:cut], tok[cut:]
            if left in ids and right in ids:
                ranked.append((-score, ids[left], ids[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece(meta: dict[str, Any], tokens: list[str], types: list[int]) -> Tokenizer:
    scores = meta.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise CheckpointError("a SentencePiece GGUF vocabulary needs tokenizer.ggml.scores, "
                              "one per token")
    vocab = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    merges = meta.get("tokenizer.ggml.merges")
    merges = ([tuple(m.split(" ", 1)) for m in merges] if merges
              else _merges_from_scores(tokens, [float(s) for s in scores]))
    tk = Tokenizer(models.BPE(vocab, merges, fuse_unk=True, byte_fallback=True))
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="first" if prefix else "never", split=False)
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    tk.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    return tk


def tokenizer_from_gguf(meta: dict[str, Any]) -> Tokenizer:
    """The file's tokenizer as a `tokenizers.Tokenizer` (no BOS added: see `tokenizer.py`).

    Raises CheckpointError if the file has no vocabulary, or one of a kind not rebuilt here.
    """
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise CheckpointError("the GGUF file holds no tokenizer (tokenizer.ggml.tokens)")
    types = list(meta.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise CheckpointError("tokenizer.ggml.token_type does not give one type per token")
    kind = meta.get("tokenizer.ggml.model")
    builders = {"gpt2": _byte_level, "llama": _sentencepiece}
    if kind not in builders:
        raise CheckpointError(f"GGUF tokenizer model {kind!r} is not supported; supported: "
                              f"{', '.join(builders)}")
    tk = builders[kind](meta, tokens, types)
    special = [AddedToken(t, special=True, normalized=False)
               for t, k in zip(tokens, types) if k == TOKEN_CONTROL]
    user = [AddedToken(t, special=False, normalized=False)
            for t, k in zip(tokens, types) if k == TOKEN_USER]
    tk.add_special_tokens(special)
    tk.add_tokens(user)
    if tk.get_vocab_size(with_added_tokens=True) != len(set(tokens)):
        raise CheckpointError("the GGUF vocabulary does not rebuild into a tokenizer of the "
                              "same size (a token spelled twice?)")
    return tk
