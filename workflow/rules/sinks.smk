# Sinks beyond BOS: the sink score and rate of Gu et al. (ICLR 2025, sail-sg), secondary
# sinks after BOS and massive activations (Sun et al. 2024), from the activation files.


rule analyze_sinks:
    input:
        activations=paths.activations,
        model_dir=paths.model_dir,  # the tokenizer: the text of secondary-sink and massive tokens
    output:
        **outputs_of("analyze_sinks"),
    params:
        sinks=config["sinks"],
        extraction=EXTRACTION_SCALE,
    priority: priority("analyze_sinks")
    log:
        paths.log("analyze_sinks", "{model}/{dataset}"),
    conda:
        conda_env("analyze_sinks")
    threads: 1
    resources:
        **job_resources("analyze_sinks"),
    script:
        "../scripts/step.py"


rule summarize_sinks:
    input:
        pooled_tables("summarize_sinks", "analyze_sinks"),
    output:
        **outputs_of("summarize_sinks"),
    params:
        eps=config["sinks"]["eps"],  # the reference threshold of the summary's sink-rate figure
    priority: priority("summarize_sinks")
    log:
        paths.log("summarize_sinks", "all"),
    conda:
        conda_env("summarize_sinks")
    resources:
        **job_resources("summarize_sinks"),
    script:
        "../scripts/step.py"
