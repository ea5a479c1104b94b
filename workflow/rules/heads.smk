# Head classification (paper §3 "Empirical head pattern labeling", §7, Remark C.4).


rule classify_heads:
    input:
        activations=paths.activations,
    output:
        per_head=paths.heads_table("per_head"),
        per_head_csv=paths.heads_table("per_head", "csv"),
        per_sequence=paths.heads_table("per_sequence"),
        per_sequence_csv=paths.heads_table("per_sequence", "csv"),
        figure_mass_heatmaps=report(
            paths.heads_figure("mass_heatmaps"),
            caption="../report/head_mass_heatmaps.rst",
            category="Head classification",
            subcategory="{model}",
            labels={"model": "{model}", "dataset": "{dataset}", "figure": "pattern masses"},
        ),
        figure_class_map=report(
            paths.heads_figure("class_map"),
            caption="../report/head_class_map.rst",
            category="Head classification",
            subcategory="{model}",
            labels={"model": "{model}", "dataset": "{dataset}", "figure": "class map"},
        ),
    params:
        thresholds=config["head_classes"],
        extraction=EXTRACTION_SCALE,
    priority: PRIORITY["classify_heads"]
    log:
        paths.log("classify_heads", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        **job_resources("classify_heads"),
    script:
        "../scripts/step.py"


rule summarize_heads:
    input:
        per_head=expand(
            paths.heads_table("per_head"),
            zip,
            model=[model for model, _ in pairs(config)],
            dataset=[dataset for _, dataset in pairs(config)],
        ),
        # every pair's per-sequence masses, which the claims bootstrap (heads.summary.share_intervals)
        per_sequence=expand(
            paths.heads_table("per_sequence"),
            zip,
            model=[model for model, _ in pairs(config)],
            dataset=[dataset for _, dataset in pairs(config)],
        ),
    output:
        table=paths.heads_summary(),
        table_csv=paths.heads_summary("csv"),
        masses=paths.heads_sequence_masses(),
        masses_csv=paths.heads_sequence_masses("csv"),
        figure_head_classes=report(
            paths.heads_summary_figure,
            caption="../report/head_classes_summary.rst",
            category="Summary",
            labels={"figure": "head classes across models and datasets"},
        ),
    params:
        thresholds=config["head_classes"],
    priority: PRIORITY["summarize_heads"]
    log:
        paths.log("summarize_heads", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        **job_resources("summarize_heads"),
    script:
        "../scripts/step.py"
