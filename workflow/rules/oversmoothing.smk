# Oversmoothing (paper §5, Theorem 5.1, eqs. 1-2, 11, 12; App. E.1, Figs. 2 and 4-11): average
# cosine similarity with no / learned / uniform attention, and Theorem 5.1's approximation.


rule analyze_oversmoothing:
    input:
        activations=paths.activations,
        per_head=paths.heads_table("per_head"),
    output:
        **outputs_of("analyze_oversmoothing"),
    params:
        oversmoothing=config["oversmoothing"],
        thresholds=config["head_classes"],
    priority: priority("analyze_oversmoothing")
    log:
        paths.log("analyze_oversmoothing", "{model}/{dataset}"),
    conda:
        conda_env("analyze_oversmoothing")
    threads: job_threads("analyze_oversmoothing")
    resources:
        **job_resources("analyze_oversmoothing"),
    script:
        "../scripts/step.py"


rule summarize_oversmoothing:
    input:
        pooled_tables("summarize_oversmoothing", "analyze_oversmoothing"),
    output:
        **outputs_of("summarize_oversmoothing"),
    params:
        uniformity_threshold=config["oversmoothing"]["uniformity_threshold"],
        thresholds=config["head_classes"],
    priority: priority("summarize_oversmoothing")
    log:
        paths.log("summarize_oversmoothing", "all"),
    conda:
        conda_env("summarize_oversmoothing")
    resources:
        **job_resources("summarize_oversmoothing"),
    script:
        "../scripts/step.py"
