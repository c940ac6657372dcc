"""Performance models and measurements (part II, "Performance models": chapters 2-4).

The estimator is the sources' equations as functions of a `ModelConfig` and a `Chip`; each is
tied to the executable model so that its prediction can be checked: parameter and KV bytes
against the arrays the model allocates, FLOPs against XLA's cost analysis, step times
against measurement on the reader's device.

What a model is and what a chip can do:

    hardware.py     the chip registry, every figure with its source
    params.py       every weight of every family, tensor by tensor; active parameters, experts
    counts.py       parameters, bytes, KV-cache bytes and FLOPs of a model
    quant.py        storage formats of weights and KV caches, scales counted
    decode_attention_cost.py  decoding attention's FLOPs and bytes per cached token, per step

A step's cost, and the one formula that times it. Two public functions compute a step time,
`step_cost.step_time` (one step, given its cost) and `estimator.estimate` (a deployment); the
other modules build costs for `step_time` to price:

    roofline.py     arithmetic intensity, critical batch, the roofline of one operation,
                    max batch, Pareto front
    step_cost.py    a step as parts (FLOPs, bytes) and priced collectives -> its time
    decode_roofline.py  the sources' decode step (the scaling book's eq. 1) as a cost
    latency.py      the tensor-parallel latency model of "Transformer Inference Arithmetic"
    moe_layouts.py  a mixture of experts on many chips: tensor- against expert-parallel
    phase_time.py   prefill and generate-step costs, KV-transfer times of a serving system
    estimator.py    `inferbook estimate`: memory, decode, prefill, TTFT on one or many chips
    estimate_inputs.py  the checks every estimate's inputs pass, the CLI's and the library's
    pareto_plot.py  the latency-throughput figure of an estimate sweep
    speculation.py  expected tokens and speedup of speculative decoding

Communication — what a layout sends, what the compiled program sends, what it costs:

    collectives.py  the exact collectives each sharded layout performs (kind, group, bytes)
    hlo.py          the collectives and FLOPs of a compiled program, read from XLA
    layout_comms.py the layouts' collectives priced on a chip's interconnect
    comm_time.py    the sources' closed forms: 1D/2D weight-stationary, limits, latency-bound

Measurements on the reader's device:

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
