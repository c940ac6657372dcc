"""A peer on the same work: Hugging Face transformers' `generate` beside the library's.

The fairest peer for a decode loop is the one its users would reach for: `LlamaForCausalLM`
with a static KV cache (allocated once, so every step has the same shapes) and the forward
pass compiled by `torch.compile` — the recipe of transformers' "LLM inference optimization"
guide, and the one gpt-fast made famous. Both sides get the same architecture (a Llama-family
`ModelConfig`), random weights of the same dtype, the same batch and prompt length, and greedy
decoding of the same number of tokens; the end-of-sequence token is disabled so that no run
stops early.

Time per token is measured the same way for both: the median time of a generation of n + 1
tokens, minus that of one token (the prefill and first sample), divided by n. Needs torch and
transformers (`ImportError` otherwise); on a GPU both run there, elsewhere on the CPU.
"""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from inferbook.model import decode, decode_layout
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import init_params
from inferbook.perf.timing import time_fn

__all__ = ["hf_config", "per_token_seconds", "hf_generate_timer", "library_generate_timer",
           "compare"]


def hf_config(cfg: ModelConfig) -> Any:
    """The transformers `LlamaConfig` of the same architecture (as `checkpoint` writes it)."""
    import transformers  # optional dependencies, here and below: only the peer needs them
    if cfg.mlp != "gated" or cfg.window:
        raise ValueError(f"{cfg.name} is not a Llama architecture")
    return transformers.LlamaConfig(
        num_hidden_layers=cfg.L, hidden_size=cfg.D, intermediate_size=cfg.F,
        num_attention_heads=cfg.N, num_key_value_heads=cfg.K, head_dim=cfg.H,
        vocab_size=cfg.V, tie_word_embeddings=cfg.tied_embeddings, rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta, hidden_act=cfg.activation,
        max_position_embeddings=cfg.max_seq_len, attention_bias=False, mlp_bias=False)


def per_token_seconds(generate: Callable[[int], Any], new_tokens: int, repeats: int) -> float:
    """(median time of generate(new_tokens + 1) - median time of generate(1)) / new_tokens,
    each median over `repeats` runs after the first call (which compiles)."""
    def median(n: int) -> float:
        return time_fn(generate, n, repeats=repeats, warmup=0).median_s
    return (median(new_tokens + 1) - median(1)) / new_tokens


def hf_generate_timer(cfg: ModelConfig, batch: int, prompt: int, dtype: str = "bfloat16",
                      compile: bool = True) -> Callable[[int], Any]:
    """A function n -> HF `generate` of n new tokens (static cache, compiled forward)."""
    import torch
    import transformers
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(hf_config(cfg)).to(getattr(torch, dtype)).eval()
    model.generation_config.cache_implementation = "static"
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    compiled = compile
    if hasattr(transformers, "CompileConfig"):
        # transformers >= 4.48 compiles the decoding forward itself when the cache is static
        # (on CUDA); this is its configuration, or its switch to turn that off.
        if compile:
            model.generation_config.compile_config = transformers.CompileConfig(
                fullgraph=True, mode="reduce-overhead")
        else:
            model.generation_config.disable_compile = True
        compiled = compile and device == "cuda"      # it compiles on accelerators only
    elif compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = torch.randint(0, cfg.V, (batch, prompt), device=device)
    mask = torch.ones_like(ids)

    def generate(n: int):
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False)
        if device == "cuda":
            torch.cuda.synchronize()
        return out
    generate.description = ("transformers generate (static cache"
                            + (", torch.compile)" if compiled else ", eager)"))
    return generate


def library_generate_timer(cfg: ModelConfig, batch: int, prompt: int,
                           dtype: str = "bfloat16") -> Callable[[int], Any]:
    """A function n -> `decode.generate` of n new tokens with the library (greedy), its decode
    steps reading the weights in the layout fastest at this batch (`decode_layout.for_batch`:
    the decode layout at batch 1), as transformers reads its own [out, in] matrices."""
    params = init_params(cfg, 0, jnp.dtype(dtype))
    step_params = decode_layout.for_batch(params, cfg, batch)
    prompts = np.random.default_rng(0).integers(0, cfg.V, (batch, prompt)).tolist()

    def generate(n: int):
        return decode.generate(params, cfg, prompts, n, pad_multiple=1,
                               step_params=step_params)
    return generate


def compare(cfg: ModelConfig, batch: int = 1, prompt: int = 128, new_tokens: int = 64,
            dtype: str = "bfloat16", repeats: int = 5, compile: bool = True) -> list[dict]:
    """Seconds per generated token of the library and of HF `generate`, on the same work."""
    rows = []
    library = library_generate_timer(cfg, batch, prompt, dtype)
    library.description = "inferbook decode.generate"
    for timer in (library, hf_generate_timer(cfg, batch, prompt, dtype, compile)):
        rows.append(dict(name=timer.description, batch=batch, prompt=prompt,
                         new_tokens=new_tokens, dtype=dtype,
                         seconds_per_token=per_token_seconds(timer, new_tokens, repeats)))
    return rows
