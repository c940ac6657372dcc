"""Attention kernels (part IV, "Kernels": chapters 6 and 7).

Each kernel is written in plain JAX first and checked against the reference attention of
`inferbook.model.attention`; the Pallas versions run where Pallas does.

    flash.py           FlashAttention's tiles and online softmax (prefill)
    flash_decoding.py  Flash-Decoding's split over the keys, and FlashDecoding++'s unified max
    paged.py           paged attention over a block table
    pallas.py          the same kernels in Pallas, for GPUs and TPUs
    kernel_bench.py    `inferbook kernel-bench`: the decoding kernels timed on a device
"""
