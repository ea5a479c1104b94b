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
        **outputs_of("analyze_streaming"),
    params:
        params=streaming_cache_params(config),  # less the re-computation's own keys
    priority: priority("analyze_streaming")
    log:
        paths.log("analyze_streaming", "{model}/{dataset}"),
    conda:
        conda_env("analyze_streaming")
    threads: 1
    resources:
        **job_resources("analyze_streaming"),
    script:
        "../scripts/step.py"


rule analyze_streaming_recompute:
    input:
        unpack(lambda wc: paths.token_stream_inputs(wc.model, wc.dataset)),
        model_dir=paths.model_dir,
        nll_by_position=paths.registered_table("analyze_streaming", "nll_by_position"),
        settings=paths.registered_table("analyze_streaming", "settings"),
    output:
        **outputs_of("analyze_streaming_recompute"),
    params:
        params=config["streaming"]["params"],
    priority: priority("analyze_streaming_recompute")
    log:
        paths.log("analyze_streaming_recompute", "{model}/{dataset}"),
    conda:
        conda_env("analyze_streaming_recompute")
    threads: 1
    resources:
        **job_resources("analyze_streaming_recompute"),
    script:
        "../scripts/step.py"


rule analyze_streaming_first_positions:
    input:
        activations=paths.activations,
    output:
        **outputs_of("analyze_streaming_first_positions"),
    params:
        first_positions=config["streaming"]["first_positions"],
    priority: priority("analyze_streaming_first_positions")
    log:
        paths.log("analyze_streaming_first_positions", "{model}/{dataset}"),
    conda:
        conda_env("analyze_streaming_first_positions")
    resources:
        **job_resources("analyze_streaming_first_positions"),
    script:
        "../scripts/step.py"


rule summarize_streaming:
    input:
        tables=pooled_tables(
            "summarize_streaming",
            "analyze_streaming",
            "analyze_streaming_recompute",
            "analyze_streaming_first_positions",
        ),
        per_head=[
            paths.heads_table("per_head").format(model=model, dataset=dataset)
            for model, dataset in PAIR_SETS["cache"]
        ],
    output:
        **outputs_of("summarize_streaming"),
    priority: priority("summarize_streaming")
    log:
        paths.log("summarize_streaming", "all"),
    conda:
        conda_env("summarize_streaming")
    resources:
        **job_resources("summarize_streaming"),
    script:
        "../scripts/step.py"
