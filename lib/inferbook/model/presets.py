"""Named model configurations: the models the book's sources discuss, the models their worked
problems invent, tiny models that decode on a laptop CPU in seconds, and (from
`presets_families`) the families readers serve today: Llama-3.x, Qwen2.5/3, Mixtral, Gemma-2,
Gemma-3, Phi-3, DeepSeek-V2/V3, OLMo-2, SmolLM3, Pythia and GPT-2.

Each real model's numbers come from its published ``config.json`` or paper, each invented
model's from the source that defines it; the comment above each entry says which.
"""

from __future__ import annotations

from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.features import MoE
from inferbook.model.presets_families import family_presets

__all__ = ["PRESETS", "get_preset"]


def _llama(name, L, D, F, N, K, V, *, theta=10_000.0, seq=4096, eps=1e-5, window=None):
    return ModelConfig(L=L, D=D, F=F, N=N, K=K, H=D // N, V=V, rope_theta=theta, norm_eps=eps,
                       max_seq_len=seq, window=window, name=name)


PRESETS: dict[str, ModelConfig] = {
    # Meta's LLaMA 2 (Touvron et al. 2023), config.json on the Hugging Face hub.
    "llama-2-7b": _llama("llama-2-7b", 32, 4096, 11008, 32, 32, 32000),
    "llama-2-13b": _llama("llama-2-13b", 40, 5120, 13824, 40, 40, 32000),
    "llama-2-70b": _llama("llama-2-70b", 80, 8192, 28672, 64, 8, 32000),
    # Meta's LLaMA 3, config.json on the hub (rope_theta 500,000, 128k vocabulary).
    "llama-3-8b": _llama("llama-3-8b", 32, 4096, 14336, 32, 8, 128256, theta=500_000.0,
                         seq=8192),
    "llama-3-70b": _llama("llama-3-70b", 80, 8192, 28672, 64, 8, 128256, theta=500_000.0,
                          seq=8192),
    # Mistral 7B v0.1 (Jiang et al. 2023): GQA with K=8 and a 4,096-token sliding window.
    "mistral-7b": _llama("mistral-7b", 32, 4096, 14336, 32, 8, 32000, seq=32768, window=4096),
    # The multi-head models of the KV-caching article's table (seed 003), sizes from each
    # config.json on the Hugging Face hub. Biases, learned or ALiBi positions and parallel
    # attention blocks are not modelled: they leave the KV cache exact and move the parameter
    # count by well under 1%. Meta's OPT (Zhang et al. 2022): ReLU MLP of 4·D, tied output.
    "opt-13b": ModelConfig(L=40, D=5120, F=20480, N=40, K=40, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-13b"),
    "opt-30b": ModelConfig(L=48, D=7168, F=28672, N=56, K=56, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-30b"),
    "opt-66b": ModelConfig(L=64, D=9216, F=36864, N=72, K=72, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-66b"),
    # MosaicML's MPT (release posts, May and June 2023): GELU MLP of 4·D, tied output, ALiBi.
    "mpt-7b": ModelConfig(L=32, D=4096, F=16384, N=32, K=32, H=128, V=50432, mlp="plain",
                          activation="gelu", tied_embeddings=True, max_seq_len=2048,
                          name="mpt-7b"),
    "mpt-30b": ModelConfig(L=48, D=7168, F=28672, N=64, K=64, H=112, V=50432, mlp="plain",
                           activation="gelu", tied_embeddings=True, max_seq_len=8192,
                           name="mpt-30b"),
    # TII's Falcon (Almazrouei et al. 2023): 7B is multi-query (one KV head for 71 query heads
    # of 64), 40B grouped-query with 8 KV heads; GELU MLP of 4·D.
    "falcon-7b": ModelConfig(L=32, D=4544, F=18176, N=71, K=1, H=64, V=65024, mlp="plain",
                             activation="gelu", tied_embeddings=True, max_seq_len=2048,
                             name="falcon-7b"),
    "falcon-40b": ModelConfig(L=60, D=8192, F=32768, N=128, K=8, H=64, V=65024, mlp="plain",
                              activation="gelu", tied_embeddings=True, max_seq_len=2048,
                              name="falcon-40b"),
    # The model invented for the scaling book's worked problems (seed 000, "worked problems"):
    # LLaMA-2-13B-like, with shared input/output embeddings.
    "scaling-book-18b": ModelConfig(L=64, D=4096, F=16384, N=32, K=8, H=256, V=32128,
                                    tied_embeddings=True, name="scaling-book-18b"),
    # kipply's 52B (Anthropic's, seed 004): d_model 8192, 64 layers, plain 4·D MLP. The post
    # gives no vocabulary; 65,536 gives the (un)embeddings just over a billion parameters.
    "kipply-52b": ModelConfig(L=64, D=8192, F=4 * 8192, N=64, K=64, H=128, V=65536, mlp="plain",
                              activation="gelu", max_seq_len=2048, name="kipply-52b"),
    # The 13B of kipply's FasterTransformer comparison: 40 layers, 40 heads of 128, D = 5120.
    # A GPT-style model; the vocabulary (GPT-2's 50,257) is our assumption.
    "kipply-13b": ModelConfig(L=40, D=5120, F=4 * 5120, N=40, K=40, H=128, V=50257, mlp="plain",
                              activation="gelu", max_seq_len=2048, name="kipply-13b"),
    # A Gopher-size model (Rae et al. 2021, table 1): 80 layers, D = 16384, 128 heads of 128.
    "gopher-280b": ModelConfig(L=80, D=16384, F=4 * 16384, N=128, K=128, H=128, V=32000,
                               mlp="plain", activation="gelu", max_seq_len=2048,
                               name="gopher-280b"),
    # BigScience's BLOOM (2022; config.json on the hub): 70 layers, D = 14336, 112 heads of
    # 128, a 250,880-token vocabulary tied to the output. Its ALiBi positions and biases do not
    # change the sizes the book computes (the KV-caching article, seed 003, uses its 4 MB/token).
    "bloom-176b": ModelConfig(L=70, D=14336, F=4 * 14336, N=112, K=112, H=128, V=250880,
                              mlp="plain", activation="gelu", tied_embeddings=True,
                              max_seq_len=2048, name="bloom-176b"),
    # Hugging Face's SmolLM2-135M-Instruct (Allal et al. 2025), config.json on the hub: the
    # book's trained model. `inferbook generate --model smollm2-135m-instruct` loads its real
    # weights (inferbook.model.model_store); everywhere else this is its shape.
    "smollm2-135m-instruct": ModelConfig(L=30, D=576, F=1536, N=9, K=3, H=64, V=49152,
                                         rope_theta=100_000.0, norm_eps=1e-5, max_seq_len=8192,
                                         tied_embeddings=True, name="smollm2-135m-instruct"),
    # Tiny models for tests and for chapters that run on a laptop CPU.
    "tiny": ModelConfig(L=2, D=64, F=192, N=4, K=2, H=16, V=256, max_seq_len=512, name="tiny"),
    "tiny-mha": ModelConfig(L=2, D=64, F=192, N=4, K=4, H=16, V=256, max_seq_len=512,
                            name="tiny-mha"),
    "tiny-mqa": ModelConfig(L=2, D=64, F=192, N=4, K=1, H=16, V=256, max_seq_len=512,
                            name="tiny-mqa"),
    # tiny with each MLP a mixture of 4 experts, 2 per token: expert parallelism on a laptop.
    "tiny-moe": ModelConfig(L=2, D=64, F=192, N=4, K=2, H=16, V=256, max_seq_len=512,
                            name="tiny-moe", moe=MoE(E=4, k=2, F=64)),
    "small": ModelConfig(L=4, D=256, F=768, N=8, K=4, H=32, V=2048, max_seq_len=2048,
                         name="small"),
    # The many-chips chapters' model: one grouped-query layer (eight query heads on four KV
    # heads), small enough to compile on eight emulated devices in seconds; a layer's
    # collectives repeat identically in every layer, so one shows them all.
    "demo-gqa": ModelConfig(L=1, D=256, F=1024, N=8, K=4, H=32, V=512, name="demo-gqa"),
    # About 84M parameters: 336 MB in float32, big enough that a CPU decode step is bound by
    # memory bandwidth rather than by dispatch overhead.
    "cpu-336mb": ModelConfig(L=4, D=1024, F=4096, N=16, K=16, H=64, V=8192, max_seq_len=4096,
                             name="cpu-336mb"),
    **family_presets(),
}


def get_preset(name: str) -> ModelConfig:
    """The preset called `name`; a ConfigError listing the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(PRESETS)}") from None
