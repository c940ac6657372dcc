"""The model every chapter runs (part I, "Foundations"; chapter 1 builds it).

    config.py          `ModelConfig`: a transformer as a few integers in the book's letters
    features.py        what a letter cannot say: rotary scaling, experts, latent attention
    presets.py         named configurations: the sources' models, real ones, tiny ones for a CPU
    hf_config.py       reading a Hugging Face ``config.json``, family by family
    hf_keys.py         ... its values, type-checked, and what Llama-like families share
    decoder.py         the decoder as pure functions over a pytree of weights: the spine
    weights.py         the weights' shapes, random draws and casts
    decode_layout.py   the same weights arranged for matrix–vector products: fused, [out, in]
    self_attention.py  the attention block: projections, biases, q/k norms, rotation
    rotary.py          rotary embeddings and their scaling rules
    norms.py           RMSNorm, LayerNorm, Gemma's (1 + w) gains
    mlp.py             the feed-forward block and its activations
    moe.py             mixtures of experts: the router, dense and gather/scatter dispatch
    mla.py             multi-head latent attention, naive and absorbed
    attention.py       plain attention, the reference every kernel is checked against
    sampling.py        greedy, temperature, top-k and top-p sampling
    kvcache.py         the KV cache (or the latent cache): allocation, appending, writing
    decode.py          prefill, decode steps and the generation loop
    generate_args.py   what a generation loop refuses, and the prompts it pads
    checkpoint.py      loading and saving safetensors checkpoints
    hf_names.py        each family's Hugging Face tensor names
    safetensors_io.py  the safetensors file format

Importing this package starts no JAX; each module loads JAX when it is imported.
"""
