# Sink geometry (paper §4 Prop. 4.1 and Fig. 1; §6 Prop. 6.1; App. E.2 Fig. 12): BOS alignment,
# half-space representability of sinks, value-matrix rank, BOS value-output and residual norms.


rule analyze_geometry:
    input:
        activations=paths.activations,
        per_head=paths.heads_table("per_head"),
    output:
        **outputs_of("analyze_geometry"),
    params:
        thresholds=config["head_classes"],
        attend_threshold=config["geometry"]["attend_threshold"],
        extraction=EXTRACTION_SCALE,
        intervals=config["claims"]["intervals"],  # the value-norm figure's bootstrap over heads
    priority: priority("analyze_geometry")
    log:
        paths.log("analyze_geometry", "{model}/{dataset}"),
    conda:
        conda_env("analyze_geometry")
    threads: 1
    resources:
        **job_resources("analyze_geometry"),
    script:
        "../scripts/step.py"


# Prop. 4.1 where it can fail: T' > d_model tokens (the StreamingLLM streams of the same corpus;
# T' = 256 tokens in d_model >= 576 are trivially separable). One forward of the model where it
# runs (extract_long_context: Z of every layer, a temporary file), the half-space solves on the
# CPU (analyze_geometry_long_context); its table decides geometry.sink_representable.
rule extract_long_context:
    input:
        unpack(lambda wc: paths.token_stream_inputs(wc.model, wc.dataset)),
        model_dir=paths.model_dir,
    output:
        inputs=temp(paths.long_context_inputs),
    params:
        long_context=long_context_params(config, LONG_CONTEXT_INPUT_KEYS),
        stream_seed=streaming_params(config)["seed"],  # the StreamingLLM streams' cut
    priority: priority("extract_long_context")
    log:
        paths.log("extract_long_context", "{model}/{dataset}"),
    conda:
        conda_env("extract_long_context")
    threads: 1
    resources:
        **job_resources("extract_long_context"),
    script:
        "../scripts/step.py"


rule analyze_geometry_long_context:
    input:
        inputs=paths.long_context_inputs,
    output:
        **outputs_of("analyze_geometry_long_context"),
    params:
        long_context=long_context_params(config, LONG_CONTEXT_SOLVE_KEYS),
        stream_seed=streaming_params(config)["seed"],  # seeds the Gaussian null
    priority: priority("analyze_geometry_long_context")
    log:
        paths.log("analyze_geometry_long_context", "{model}/{dataset}"),
    conda:
        conda_env("analyze_geometry_long_context")
    threads: 1
    resources:
        **job_resources("analyze_geometry_long_context"),
    script:
        "../scripts/step.py"


rule summarize_geometry:
    input:
        pooled_tables("summarize_geometry", "analyze_geometry", "analyze_geometry_long_context"),
    output:
        **outputs_of("summarize_geometry"),
    params:
        intervals=config["claims"]["intervals"],  # the BOS value norms' bootstraps over heads
    priority: priority("summarize_geometry")
    log:
        paths.log("summarize_geometry", "all"),
    conda:
        conda_env("summarize_geometry")
    resources:
        **job_resources("summarize_geometry"),
    script:
        "../scripts/step.py"
