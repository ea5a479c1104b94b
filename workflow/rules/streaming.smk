# StreamingLLM (attention-sinks notes): next-token NLL over long token streams when the KV cache
# evicts (window only, sink + window, neutral sink + window), per model x dataset; those caches
# against sliding window with re-computation (StreamingLLM's baseline); and the attention mass on
# the first positions from the extraction's HDF5 file. Three rules, so that neither a new
# baseline nor a re-extraction re-runs the cache evaluation.


rule analyze_streaming:
    input:
        unpack(lambda wc: paths.token_stream_inputs(wc.model, wc.dataset)),
        model_dir=paths.model_dir,
    output:
        **tables_of("streaming", STREAMING_POLICY_TABLES),
        **figures_of("streaming", STREAMING_POLICY_FIGURES, "StreamingLLM caches"),
    params:
        params=config["streaming"]["params"],
    priority: PRIORITY["analyze_streaming"]
    log:
        paths.log("analyze_streaming", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    threads: 1
    resources:
        **job_resources("analyze_streaming"),
    script:
        "../scripts/step.py"


rule analyze_streaming_recompute:
    input:
        unpack(lambda wc: paths.token_stream_inputs(wc.model, wc.dataset)),
        model_dir=paths.model_dir,
        nll_by_position=paths.table("streaming", "nll_by_position"),
        settings=paths.table("streaming", "settings"),
    output:
        **tables_of("streaming", STREAMING_RECOMPUTE_TABLES),
        **figures_of("streaming", STREAMING_RECOMPUTE_FIGURES, "StreamingLLM caches"),
    params:
        params=config["streaming"]["params"],
    priority: PRIORITY["analyze_streaming_recompute"]
    log:
        paths.log("analyze_streaming_recompute", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    threads: 1
    resources:
        **job_resources("analyze_streaming_recompute"),
    script:
        "../scripts/step.py"


rule analyze_streaming_first_positions:
    input:
        activations=paths.activations,
    output:
        **tables_of("streaming", STREAMING_FIRST_POSITION_TABLES),
        **figures_of("streaming", STREAMING_FIRST_POSITION_FIGURES, "StreamingLLM caches"),
    params:
        first_positions=config["streaming"]["first_positions"],
    priority: PRIORITY["analyze_streaming_first_positions"]
    log:
        paths.log("analyze_streaming_first_positions", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        **job_resources("analyze_streaming_first_positions"),
    script:
        "../scripts/step.py"


rule summarize_streaming:
    input:
        tables=[
            paths.table("streaming", name).format(model=model, dataset=dataset)
            for model, dataset in STREAMING_CACHE_PAIRS
            for name in STREAMING_TABLES
        ],
        per_head=[
            paths.heads_table("per_head").format(model=model, dataset=dataset)
            for model, dataset in STREAMING_CACHE_PAIRS
        ],
    output:
        **summary_tables_of("streaming", STREAMING_SUMMARY_TABLES),
        **summary_figures_of("streaming", STREAMING_SUMMARY_FIGURES, "StreamingLLM caches"),
    priority: PRIORITY["summarize_streaming"]
    log:
        paths.log("summarize_streaming", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        **job_resources("summarize_streaming"),
    script:
        "../scripts/step.py"
