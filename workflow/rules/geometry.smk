# Sink geometry (paper §4 Prop. 4.1 and Fig. 1; §6 Prop. 6.1; App. E.2 Fig. 12): BOS alignment,
# half-space representability of sinks, value-matrix rank, BOS value-output and residual norms.


rule analyze_geometry:
    input:
        activations=paths.activations,
        per_head=paths.heads_table("per_head"),
    output:
        **tables_of("geometry", GEOMETRY_TABLES),
        **figures_of("geometry", GEOMETRY_FIGURES, "Sink geometry"),
    params:
        thresholds=config["head_classes"],
        geometry=config["geometry"],
        extraction=config["extraction"],
    priority: PRIORITY["analyze_geometry"]
    log:
        paths.log("analyze_geometry", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    threads: 1
    resources:
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: 30 * attempt,
    script:
        "../scripts/analyze_geometry.py"


rule summarize_geometry:
    input:
        pair_tables("geometry", GEOMETRY_TABLES),
    output:
        **summary_tables_of("geometry", GEOMETRY_SUMMARY_TABLES),
        **summary_figures_of("geometry", GEOMETRY_FIGURES, "Sink geometry"),
    priority: PRIORITY["summarize_geometry"]
    log:
        paths.log("summarize_geometry", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: 20 * attempt,
    script:
        "../scripts/summarize_geometry.py"
