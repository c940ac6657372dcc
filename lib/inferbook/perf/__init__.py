"""Performance models and measurements (part II, "Performance models": chapters 2-4).

The estimator is the sources' equations as functions of a `ModelConfig` and a `Chip`; each is
tied to the executable model so that its prediction can be checked: parameter and KV bytes
against the arrays the model allocates, FLOPs against XLA's cost analysis, step times
against measurement on the reader's device.

    hardware.py     the chip registry, every figure with its source
    params.py       every weight of every family, tensor by tensor; active parameters, experts
    counts.py       parameters, bytes, KV-cache bytes and FLOPs of a model
    quant.py        storage formats of weights and KV caches, scales counted
    roofline.py     arithmetic intensity, critical batch, step time, max batch, Pareto front
    latency.py      the tensor-parallel latency model of "Transformer Inference Arithmetic"
    comm_time.py    time spent in collectives: 1D/2D weight-stationary, limits, latency-bound
    layout_comms.py the collectives of the 1D/2D/expert-parallel layouts, priced on a chip's
                    interconnect
    moe_layouts.py  a mixture of experts on many chips: tensor- against expert-parallel
    latent_attention_cost.py  decoding attention's FLOPs and bytes per cached token (MLA)
    estimator.py    `inferbook estimate`: memory, decode, prefill, TTFT on one or many chips
    pareto_plot.py  the latency-throughput figure of an estimate sweep
    phase_time.py   prefill, generate-step and KV-transfer times of a serving system
    speculation.py  expected tokens and speedup of speculative decoding
    timing.py       timing functions honestly: warm-up, medians, compile time apart
    compiled.py     what XLA says about a compiled program: FLOPs, bytes, memory, arrays
    microbench.py   the device's two roofs measured: matmul FLOP/s (and the read roof's home)
    read_roof.py    the read roof W: the best of several read kernels, each by its fastest run
    step_programs.py  the parts of a step as programs: matmuls, attention, the skeleton model
    calibration.py  a step predicted from its parts timed alone, each by its work beyond the
                    skeleton's; the calibrated estimator's sweep
    bench.py        `inferbook bench`: MBU and MFU of the decode step, saved for chapter 2
    bench_results.py  the benchmark's records: where they are saved and found
    bench_targets.py  the targets a quiet CPU run is held to, and which a record meets
    decode_levers.py  each lever's effect on the batch-1 step (`inferbook bench --levers`)
    hf_peer.py      the same decode measured with Hugging Face transformers, as a peer

Importing this package starts no JAX.
"""
