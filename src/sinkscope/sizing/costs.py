"""Per-unit costs of every rule, measured on real runs; :mod:`sinkscope.sizing.requests` scales
them by each job's units (layers, bytes of one layer's data, token-forwards, FLOPs).

Each number says where it was measured. Times of CPU jobs are wall seconds of one job on the
reference CPU, :data:`REFERENCE_CPU`; a slower CPU is covered by :data:`TIME_MARGIN` and the
retries (each attempt asks for ``attempt`` times the request). GPU times follow from FLOPs at an
assumed sustained throughput (the same assumptions as BENCHMARKS.md section 7).
"""

from __future__ import annotations

from sinkscope.outputs import AnalysisCost

__all__ = [
    "ANALYSIS_COSTS",
    "APPROXIMATION_TERMS_S_PER_GMAC",
    "CLAIMS_BYTES_PER_TABLE_BYTE",
    "CLAIMS_S_PER_TABLE_MB",
    "CLUSTER_THREADS",
    "CPU_FORWARD_FLOP_S",
    "CUDA_CONTEXT_BYTES",
    "D2H_GB_S",
    "FS_GB_S",
    "GPU_MEM_MARGIN",
    "GPU_TFLOPS",
    "HALFSPACE_JOB_FIXED_S",
    "HALFSPACE_NULL_S_PER_POINT2_DIM",
    "HALFSPACE_S_PER_POINT_DIM",
    "JOB_FIXED_MB",
    "MEM_MARGIN",
    "MIN_MEM_MB",
    "MIN_RUNTIME_MIN",
    "MODEL_FREE_REQUESTS",
    "MODEL_JOB_FIXED_S",
    "REFERENCE_CPU",
    "TIME_MARGIN",
    "WEIGHT_COPIES_WHILE_LOADING",
    "WEIGHT_COPIES_WHILE_LOADING_ON_GPU",
]

#: The CPU the per-unit CPU times were measured on (2 cores; one job alone).
REFERENCE_CPU = "AMD EPYC, 2 cores (the project's CI machine kind)"

#: Memory asked = estimated peak x this; covers the estimate's spread between models of the
#: same shape (measured peaks fell within 0.7-1.0 of the estimates, tests/test_sizing.py).
MEM_MARGIN = 1.5
#: Time asked = estimated wall time x this: CPUs differ about 2x (an AVX2-only EPYC took 2.2x the
#: job-minutes of the Intel machine the README's first times came from).
TIME_MARGIN = 2.5
#: Nothing below these: a SLURM job's own overhead, and a scheduler's minute granularity.
MIN_MEM_MB = 1000
MIN_RUNTIME_MIN = 5

#: Resident memory of a job before it reads any data: Python, torch, polars, h5py, matplotlib
#: (measured on a clean CI run of the tiny config, whose data is kilobytes: peak RSS 0.24-0.51 GB
#: for the file-reading jobs, 0.24 classify_heads, 0.51 analyze_sinks; tests/test_sizing.py keeps
#: every model-sized request of that run within 3x its peak).
JOB_FIXED_MB = 450.0

#: Sustained throughput of an eager bf16 forward on one data-centre GPU (H100/A100 class; about a
#: fifth of an H100's dense bf16 peak), device-to-host copies and the shared file system:
#: assumptions, shared with BENCHMARKS.md section 7. Measured once (bench/gpu_rehearsal.py,
#: random-weight Llama-3.1-8B, N x T = 50 x 256, one H200): the forward ran at 114-187 TFLOP/s
#: over two runs, the device-to-host copies (casts included) at about 1.5 GB/s; the forward and
#: the copies are 1/4 of the job's wall time, so these stay as they are.
GPU_TFLOPS, D2H_GB_S, FS_GB_S = 200.0, 10.0, 1.0

#: GPU memory that a job holds before its tensors: the CUDA context and the caching allocator's
#: first blocks (about 0.5-1 GB on recent cards; the larger end).
CUDA_CONTEXT_BYTES = 10**9
#: A GPU type must hold a job's estimated GPU peak x this (allocator fragmentation; the estimate
#: covered the measured peaks by 1.03-1.24, bench/gpu_rehearsal.json, tests/test_sizing.py).
GPU_MEM_MARGIN = 1.1

#: Host copies of the weights while a model loads: the safetensors file's pages (memory-mapped,
#: counted in the resident set) and the model's own tensors. Measured: the long-context job's
#: peak grew by 254 MB from 1 to 2 layers of GPT-2 XL's widths (float32), 2.06 x one layer's
#: 123 MB of weights (bench/rehearsal.py).
WEIGHT_COPIES_WHILE_LOADING = 2
#: The same on a GPU node, where the weights leave the host once loaded: the host holds them
#: (one copy) while they load, then the job's own buffers, so its peak is the larger of the two,
#: not their sum. Measured (bench/gpu_rehearsal.py, random-weight Llama-3.1-8B in bfloat16, 16.1 GB
#: of weights, one H200): extraction 16.2 GB peak RSS (its batches: 7.5 GB), long-context inputs
#: 21.7 GB (its float32 Z of 2 x 10,241 tokens, 10.7 GB, was then held twice while the sequences'
#: parts were joined; it is now filled in place); the sum had asked 3.7x and 3.6x that. The
#: estimates before the margin (15.8 and 21.6 GB) sit 1-2 % under those peaks: ``MEM_MARGIN``
#: covers them.
WEIGHT_COPIES_WHILE_LOADING_ON_GPU = 1

#: Threads of the rules that use more than one, on a cluster node: the extraction compresses and
#: writes batch b on them while the GPU runs batch b + 1 (BENCHMARKS.md section 7: 4 cores encode
#: an 8B model's attention maps faster than a parallel file system writes them); the
#: oversmoothing analysis's torch products (float32 A V and X W_O, float64 moments) on 2.
#: Every other rule runs one thread. On one machine (a local run) see
#: :func:`sinkscope.sizing.requests.job_threads`.
CLUSTER_THREADS: dict[str, int] = {"extract_activations": 4, "analyze_oversmoothing": 2}

#: Fixed wall time of a job that runs a model: imports, CUDA start, tokenizer, tables, figures.
MODEL_JOB_FIXED_S = 120.0
#: Fixed wall time of the long-context solve job besides its solves and reads: imports, the
#: table and its figure (about 10-15 s on the reference CPU, doubled).
HALFSPACE_JOB_FIXED_S = 30.0

#: Seconds per point and dimension of the long-context half-space test (one linear program per
#: layer, sequence and point set; measured: SmolLM2-135M, 30 layers x 2 x 1,023 points in
#: d = 576, 19 s on one core of the reference CPU).
HALFSPACE_S_PER_POINT_DIM = 5.4e-7
#: Seconds per squared point and dimension of a half-space solve around the origin, where the
#: support grows to about d (a Gaussian null, or a set that fails). Isotropic Gaussian points on
#: one core of a 2-core Intel Xeon: 0.9 s at d = 640 and n = 1,600 points, 3.2 s at 1,024 x
#: 2,560, 13 s at 1,536 x 3,840 (5.5e-10). Nulls with a real layer's covariance solve 2-4 times
#: slower: the default run's long-context jobs (1 x 1,441 tokens, d = 576, and 1 x 1,601, d = 640)
#: spent 2.1-3.8 s per null on that CPU (1.8-2.3e-9 per point^2 x dim); times the 2.2 that the same
#: jobs took longer on the reference CPU.
HALFSPACE_NULL_S_PER_POINT2_DIM = 5.0e-9

#: The fraction of its raw bytes that the codec stores of a compressed dataset of an activation
#: file (``extraction.codec`` zstd at level 1, shuffle): 0.406 measured on the attention maps of
#: the default run's 8 files (1,446 MB raw, 587 MB stored), the bulk of what is compressed. The
#: disk of ``sinkscope plan`` counts the datasets of ``extraction.uncompressed`` raw and the rest
#: at this fraction: 14.6 GB for the Llama-width rehearsal's file, which held 13.9 GB (BENCHMARKS.md,
#: GPU rehearsal). A higher level stores less, so it bounds those too.
CODEC_STORED_FRACTION = 0.41

#: FLOP/s of a float32 eager forward on the reference CPU, one job on 1-2 threads (measured:
#: SmolLM2-135M extraction, 8 x 257 tokens, and the 2-layer Llama-width rehearsal).
CPU_FORWARD_FLOP_S = 2.0e10


#: The file-reading analyses, measured on the rehearsal at Llama-3.1-8B's widths cut to 2 and 4
#: layers (N = 50, T = 256: one layer holds 0.98 GB as float32; bench/rehearsal.py)
#: on :data:`REFERENCE_CPU` while another 2-core job ran (times up to about 2x those of a job
#: alone): per layer the difference of the two cuts, the fixed part what is left. Peaks held
#: flat from 2 to 4 layers (classify_heads 0.41 GB, geometry 0.77, sinks 1.11, oversmoothing
#: 1.85-1.87: one layer at a time).
#:
#: The oversmoothing analysis holds a layer's attention maps as stored (float16, half their
#: float32 bytes) plus float32 temporaries of a few sequences, and the rows (X, the update, the
#: per-head values) several times over in float32 and float64: its peak follows the rows, not
#: the maps. Its shares are fitted to the rehearsals at four widths (2-core Intel
#: Xeon): above the fixed part 1.40 GB at Llama-3.1-8B's and Mistral-7B's widths, 0.97 Gemma-7B,
#: 1.06 gpt-oss-20b (64 heads), 0.46 GPT-2 XL; 2.6 x the rows and 0.8 x the maps cover each
#: within 1.0-1.4x. It grows by 3-9 MB a layer (0.003-0.017 of a layer's data: gpt-oss-20b,
#: GPT-2 XL); 0.025 covers both.
#: Seconds per 10^9 multiply-adds of the oversmoothing job's per-sequence terms of eq. (2)
#: (:func:`sinkscope.oversmoothing.approximation.sequence_terms`: ``N T' (G + H) k D`` a layer,
#: for ``G`` value maps and ``H`` heads of ``k`` dimensions, every prefix T' from the same
#: projections), which the rehearsals above predate.
#: bench/approximation_bench.py on :data:`REFERENCE_CPU` itself (the 2-core AMD EPYC,
#: two runs): 36-69 GMAC/s over every prefix T' at the widths of Llama-3.1-8B, Gemma-7B and
#: GPT-2 XL, 1.0-1.4 x the time of the earlier kernel's largest T' alone; the slowest halved
#: for a second job on the cores: about 18 GMAC/s. Adds 16 s a layer at Llama-3.1-8B's widths
#: (N = 50, T' = 256; the analysis's per-layer share is about 100 s) and 19 s at Gemma-7B's.
APPROXIMATION_TERMS_S_PER_GMAC = 0.06

ANALYSIS_COSTS: dict[str, AnalysisCost] = {
    "classify_heads": AnalysisCost(rss_layers=0.25, s_per_gb=3.5, fixed_s=10.0),
    "analyze_geometry": AnalysisCost(rss_layers=0.6, s_per_gb=20.0, fixed_s=45.0),
    "analyze_oversmoothing": AnalysisCost(
        rss_layers=2.6, rss_maps=0.8, s_per_gb=100.0, fixed_s=130.0, rss_growth=0.025
    ),
    # the time of the worst data: every eligible position a secondary sink (bench/rehearsal.py
    # --sink-heavy at GPT-2 XL's widths: 4.75 s a layer of 0.51 GB, against 1.2 s with random
    # weights' few sinks)
    "analyze_sinks": AnalysisCost(rss_layers=1.0, s_per_gb=10.0, fixed_s=40.0),
    "analyze_streaming_first_positions": AnalysisCost(rss_layers=0.1, s_per_gb=0.5),
}

#: Jobs whose size does not depend on a model: (peak MB, minutes) before the margins, above the
#: peaks measured in the tiny run and the rehearsals (0.25-0.5 GB: Python, torch, polars and
#: small tensors) and the minutes of the full offline scale on :data:`REFERENCE_CPU`. Dynamics
#: runs take their minutes from their grid (:func:`sinkscope.dynamics.grids.dynamics_minutes`).
MODEL_FREE_REQUESTS: dict[str, tuple[float, float]] = {
    # a local rule (runs on the submit host, where no request applies): fetch and, for a GGUF,
    # dequantise to float32 and save (Gemma 3 270M: 6 GB peak)
    "prepare_model": (6000.0, 20.0),
    "tokenize_corpus": (700.0, 5.0),
    "cut_tokens": (600.0, 2.0),
    # cross-pair summaries: tables of at most a few MB per pair, and the summary figures
    "summarize_heads": (1500.0, 3.0),
    "summarize_geometry": (2500.0, 5.0),
    "summarize_oversmoothing": (2500.0, 5.0),
    "summarize_sinks": (1500.0, 3.0),
    "summarize_streaming": (2500.0, 5.0),
    "prepare_corpus": (2000.0, 5.0),
    "cost_toy": (700.0, 5.0),
    "cost_backcopy_run": (1000.0, 20.0),
    "cost_backcopy_e2e": (1000.0, 40.0),
    "cost_copypaste_run": (1000.0, 20.0),
    "dynamics_value_softmax_run": (700.0, 0.0),
    "dynamics_induction_run": (1300.0, 0.0),
    "dynamics_classification_run": (1300.0, 0.0),
    "summarize_backcopy": (700.0, 2.0),
    "summarize_copypaste": (700.0, 2.0),
    "summarize_backcopy_e2e": (700.0, 2.0),
    "summarize_dynamics_value_softmax": (2500.0, 5.0),
    "summarize_dynamics_induction": (2500.0, 5.0),
    "summarize_dynamics_classification": (2500.0, 5.0),
    "claims": (700.0, 2.0),
}

#: The claims job over the per-sequence tables it resamples
#: (:func:`sinkscope.sizing.requests.per_sequence_table_bytes`): bytes held per byte of those
#: tables (the tables, the rows of one model each interval cuts from them, the resampled draws)
#: and seconds per MB of them, on top of the job's fixed part in :data:`MODEL_FREE_REQUESTS`.
#: Measured (bench/claims_bench.py, config/paper.yaml: 729 MB of tables as counted, on the
#: reference CPU): 315 intervals over sequences with a test run beside it, peak 3,261 MB, i.e.
#: 2,561 MB above the fixed part (3.5 bytes per table byte), in 164 s; 350 (the share of heads
#: within the approximation's bound added), the same peak, in 65 s with no test beside it. The
#: time is kept at the loaded measurement's, the slower.
CLAIMS_BYTES_PER_TABLE_BYTE = 3.6
CLAIMS_S_PER_TABLE_MB = 0.25
