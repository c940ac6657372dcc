"""The model every chapter runs (part I, "Foundations"; chapter 1 builds it).

    config.py      `ModelConfig`: a transformer as a handful of integers in the book's letters
    presets.py     named configurations: the sources' models, real ones, tiny ones for a CPU
    hf_config.py   reading a Hugging Face ``config.json``
    decoder.py     the decoder as pure functions over a pytree of weights
    attention.py   plain attention, the reference every kernel is checked against
    sampling.py    greedy, temperature, top-k and top-p sampling
    kvcache.py     the KV cache: allocation, appending, writing
    decode.py      prefill, decode steps and the generation loop
    checkpoint.py  loading and saving safetensors checkpoints with Hugging Face's names

Importing this package starts no JAX; each module loads JAX when it is imported.
"""
