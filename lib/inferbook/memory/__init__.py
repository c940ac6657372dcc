"""Shrinking the KV cache (part III, "Memory": the KV-cache chapter).

Each module implements one lever on the cache's size, runs it in the model, and checks it
against the full-cache reference:

    kv_window.py   local attention: a sliding window over the past (Mistral, StreamingLLM)
    kv_share.py    one cache for several layers (cross-layer sharing)
    kv_quant.py    an int8 cache with per-token scales
    kv_evict.py    forgetting tokens: attention sinks and heavy hitters (StreamingLLM, H2O)
    kv_usage.py    what a layout reserves against what it holds: contiguous and paged

The memory simulation of the chapter (contiguous reservations against the serving engine's
paged blocks, `inferbook.serving.memory_sim`) runs the engine's own block manager.

Grouped-query attention needs no module of its own: it is `ModelConfig.K`.
"""
