# Head classification (paper §3 "Empirical head pattern labeling", §7, Remark C.4).


rule classify_heads:
    input:
        activations=paths.activations,
    output:
        **outputs_of("classify_heads"),
    params:
        thresholds=config["head_classes"],
        extraction=EXTRACTION_SCALE,
    priority: priority("classify_heads")
    log:
        paths.log("classify_heads", "{model}/{dataset}"),
    conda:
        conda_env("classify_heads")
    resources:
        **job_resources("classify_heads"),
    script:
        "../scripts/step.py"


rule summarize_heads:
    input:
        per_head=pooled_tables("summarize_heads", "classify_heads", table="per_head"),
        # every pair's per-sequence masses, which the claims bootstrap (heads.summary.share_intervals)
        per_sequence=pooled_tables("summarize_heads", "classify_heads", table="per_sequence"),
    output:
        **outputs_of("summarize_heads"),
    params:
        thresholds=config["head_classes"],
    priority: priority("summarize_heads")
    log:
        paths.log("summarize_heads", "all"),
    conda:
        conda_env("summarize_heads")
    resources:
        **job_resources("summarize_heads"),
    script:
        "../scripts/step.py"
