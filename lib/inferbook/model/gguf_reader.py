"""Reading a GGUF file (llama.cpp's format) with the `gguf` package: metadata, tensors, config.

A .gguf file is one self-describing binary: a header of typed key–value metadata (the
architecture's hyperparameters under ``<arch>.*``, the tokenizer under ``tokenizer.ggml.*``,
the chat template under ``tokenizer.chat_template``), a table of tensors (name, ggml shape,
type, offset), then the tensors' bytes. The `gguf` package, llama.cpp's own Python reader,
memory-maps it; `open_gguf` wraps that reader so that a file that is not a GGUF, a truncated
download, or a tensor type llama.cpp does not define is refused with one line naming the file,
and `gguf_hf_config` translates the hyperparameters into the keys of a Hugging Face
``config.json`` so that `hf_config.from_hf_config` builds the `ModelConfig` — one config
reader for both kinds of checkpoint.

Families: the llama.cpp architectures ``llama`` (Llama 1–3, Mistral, SmolLM), ``qwen2`` and
``qwen3``. The rest are refused by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferbook.model.safetensors_io import CheckpointError

__all__ = ["GGUFFile", "open_gguf", "gguf_hf_config", "GGUF_FAMILIES", "eos_ids_from_gguf",
           "tensor_matrix_shape"]

# llama.cpp architecture -> Hugging Face model_type.
GGUF_FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}


@dataclass
class GGUFFile:
    """An opened GGUF file: its metadata (key -> Python value) and tensors (name -> the
    gguf package's ReaderTensor: ggml type, ggml shape [cols, rows], memory-mapped data)."""

    path: Path
    metadata: dict[str, Any]
    tensors: dict[str, Any]

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        """An architecture key (``block_count`` is ``<arch>.block_count``), else `default`."""
        return self.metadata.get(f"{self.architecture}.{key}", default)


def _reader(path: Path) -> Any:
    """The gguf package's reader over a plain array view of the mapped file.

    The reader memory-maps the file and slices the map once per metadata value: a tokenizer of
    49,152 tokens and nearly as many merges is some 250,000 slices, and each slice of an `np.memmap`
    runs numpy's Python-level `memmap.__array_finalize__`. Over a plain `ndarray` view of the
    same mapping (same bytes, nothing copied, still read-only) the reader opens SmolLM2's file
    about 2.8 times faster (medians of three on this project's 2-core CPU: 5.2 s -> 1.8 s)."""
    import gguf  # imported here: the package reads numpy only, but is not needed elsewhere

    class PlainViewReader(gguf.GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, mapped: np.ndarray) -> None:
            self._plain = mapped.view(np.ndarray)

    return PlainViewReader(str(path))


def open_gguf(path: str | Path) -> GGUFFile:
    """Open and check a GGUF file; CheckpointError (one line) if it cannot be read whole."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"GGUF file {path} does not exist")
    try:
        reader = _reader(path)
    except ValueError as err:
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if "GGMLQuantizationType" in text:
            raise CheckpointError(f"{path}: a tensor has an unknown quantization type "
                                  f"({text}); this file needs a newer reader or is "
                                  "corrupt") from None
        if "magic" in text.lower():
            raise CheckpointError(f"{path} is not a GGUF file (its first bytes are not "
                                  "'GGUF')") from None
        raise CheckpointError(f"{path} is not a readable GGUF file: truncated or corrupt "
                              f"({text})") from None
    except (OSError, IndexError, KeyError, UnicodeDecodeError, OverflowError,
            MemoryError) as err:
        raise CheckpointError(f"{path} is not a readable GGUF file: truncated or corrupt "
                              f"({type(err).__name__}: {err})") from None
    if reader.byte_order != "I":
        raise CheckpointError(f"{path} is a big-endian GGUF file; only little-endian files "
                              "are supported")
    try:
        metadata = {name: f.contents() for name, f in reader.fields.items()}
    except (UnicodeDecodeError, ValueError, IndexError) as err:
        raise CheckpointError(f"{path}: its metadata cannot be decoded ({err})") from None
    tensors = {}
    for t in reader.tensors:
        expected = math.prod(int(d) for d in t.shape)
        if t.n_elements != expected or t.data.nbytes != t.n_bytes:
            raise CheckpointError(f"{path}: tensor {t.name!r} holds {t.data.nbytes} of its "
                                  f"{t.n_bytes} bytes (a truncated file?)")
        tensors[t.name] = t
    return GGUFFile(path, metadata, tensors)


def _int(gf: GGUFFile, key: str, default: Any = None) -> Any:
    value = gf.get(key, default)
    if isinstance(value, list):
        raise CheckpointError(f"{gf.path}: {gf.architecture}.{key} differs between layers "
                              f"({value[:4]}...), which this library does not model")
    return None if value is None else int(value)


def _decimal(value: Any) -> float:
    """A float32 from the file as the decimal it was written from: llama.cpp stores 1e-5 as
    the float32 nearest it (9.99999975e-06); its shortest decimal gives 1e-05 back."""
    return float(str(np.float32(value)))


def _rope_scaling(gf: GGUFFile) -> dict[str, Any] | None:
    kind = gf.get("rope.scaling.type", "none")
    if kind in ("none", None):
        return None
    if kind not in ("linear", "yarn"):
        raise CheckpointError(f"{gf.path}: rope scaling {kind!r} is not supported")
    scaling = {"rope_type": kind, "factor": _decimal(gf.get("rope.scaling.factor", 1.0))}
    original = gf.get("rope.scaling.original_context_length")
    if original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    return scaling


def gguf_hf_config(gf: GGUFFile) -> dict[str, Any]:
    """The file's hyperparameters as a Hugging Face config dictionary (for `from_hf_config`)."""
    arch = gf.architecture
    if arch not in GGUF_FAMILIES:
        raise CheckpointError(f"{gf.path}: GGUF architecture {arch!r} is not supported; "
                              f"supported: {', '.join(GGUF_FAMILIES)}")
    for key in ("block_count", "embedding_length", "attention.head_count"):
        if gf.get(key) is None:
            raise CheckpointError(f"{gf.path}: metadata has no {arch}.{key}")
    D, N = _int(gf, "embedding_length"), _int(gf, "attention.head_count")
    H = _int(gf, "attention.key_length", D // N)
    rotary = _int(gf, "rope.dimension_count", H)
    if rotary != H:
        raise CheckpointError(f"{gf.path}: rotary embeddings over {rotary} of {H} head "
                              "dimensions are not supported")
    embed = gf.tensors.get("token_embd.weight")
    tokens = gf.metadata.get("tokenizer.ggml.tokens")
    V = gf.get("vocab_size") or (int(embed.shape[1]) if embed is not None else len(tokens or []))
    hf = {"model_type": GGUF_FAMILIES[arch], "num_hidden_layers": _int(gf, "block_count"),
          "hidden_size": D, "intermediate_size": _int(gf, "feed_forward_length"),
          "num_attention_heads": N, "num_key_value_heads": _int(gf, "attention.head_count_kv", N),
          "head_dim": H, "vocab_size": int(V),
          "rms_norm_eps": _decimal(gf.get("attention.layer_norm_rms_epsilon", 1e-6)),
          "rope_theta": _decimal(gf.get("rope.freq_base", 10_000.0)),
          "max_position_embeddings": _int(gf, "context_length", 4096),
          "tie_word_embeddings": "output.weight" not in gf.tensors,
          "rope_scaling": _rope_scaling(gf),
          "sliding_window": _int(gf, "attention.sliding_window")}
    if arch == "qwen2":
        hf["use_sliding_window"] = False
    return hf


def eos_ids_from_gguf(gf: GGUFFile) -> tuple[int, ...]:
    """The end-of-sequence ids the file declares: llama.cpp's eos, end-of-turn and
    end-of-message tokens (``tokenizer.ggml.{eos,eot,eom}_token_id``), in that order."""
    ids = []
    for key in ("eos", "eot", "eom"):
        value = gf.metadata.get(f"tokenizer.ggml.{key}_token_id")
        if value is not None and int(value) not in ids:
            ids.append(int(value))
    return tuple(ids)


def tensor_matrix_shape(t: Any) -> tuple[int, ...]:
    """A tensor's shape in numpy order ([rows, cols] for a matrix; ggml lists cols first)."""
    return tuple(int(d) for d in reversed(np.asarray(t.shape).tolist()))
