# Synthetic cost experiments of §7 (Theorems 7.1, 7.2, D.1; Figure 3): no pretrained model.
# Every (task, pattern, size, seed) run is its own job, so Snakemake or SLURM runs them in parallel.


rule cost_toy:
    output:
        table=paths.cost_table("toy"),
        table_csv=paths.cost_table("toy", "csv"),
        figure_toy=report(
            paths.cost_figure("toy"),
            caption="../report/costs_toy.rst",
            category="Costs of sinks vs diagonals (§7)",
            labels={"figure": "nuclear-norm toy"},
        ),
    params:
        T=config["costs"]["toy_T"],
    priority: PRIORITY["cost_toy"]
    log:
        paths.log("cost_toy", "toy"),
    conda:
        "../../envs/sinkscope.yaml"
    script:
        "../scripts/step.py"


rule cost_backcopy_run:
    output:
        row=paths.cost_run("backcopy"),
    params:
        params=config["costs"]["backcopy"]["params"],
    priority: PRIORITY["cost_backcopy_run"]
    log:
        paths.log("cost_backcopy_run", "{pattern}_T{T}_seed{seed}"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: 60 * attempt,
    script:
        "../scripts/step.py"


rule cost_backcopy_e2e:
    output:
        row=paths.cost_run("backcopy_e2e"),
    params:
        params=backcopy_end_to_end_params(config),
    priority: PRIORITY["cost_backcopy_e2e"]
    log:
        paths.log("cost_backcopy_e2e", "{pattern}_T{T}_seed{seed}"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: 120 * attempt,
    script:
        "../scripts/step.py"


rule cost_copypaste_run:
    output:
        row=paths.cost_run("copypaste"),
    params:
        params=config["costs"]["copypaste"]["params"],
    priority: PRIORITY["cost_copypaste_run"]
    log:
        paths.log("cost_copypaste_run", "{pattern}_n{n}_delta{delta}_seed{seed}"),
    conda:
        "../../envs/sinkscope.yaml"
    resources:
        mem_mb=lambda wc, attempt: 4000 * attempt,
        runtime=lambda wc, attempt: 60 * attempt,
    script:
        "../scripts/step.py"


rule summarize_backcopy:
    input:
        rows=expand(
            paths.cost_run("backcopy"),
            pattern=config["costs"]["backcopy"]["patterns"],
            T=config["costs"]["backcopy"]["T"],
            seed=config["costs"]["backcopy"]["seeds"],
        ),
    output:
        table_runs=paths.cost_table("backcopy_runs"),
        table_runs_csv=paths.cost_table("backcopy_runs", "csv"),
        table_slopes=paths.cost_table("backcopy_slopes"),
        table_slopes_csv=paths.cost_table("backcopy_slopes", "csv"),
        table_condition3=paths.cost_table("condition3"),
        table_condition3_csv=paths.cost_table("condition3", "csv"),
        table_condition3_measured=paths.cost_table("condition3_measured"),
        table_condition3_measured_csv=paths.cost_table("condition3_measured", "csv"),
        figure_backcopy_costs=report(
            paths.cost_figure("backcopy_costs"),
            caption="../report/costs_backcopy.rst",
            category="Costs of sinks vs diagonals (§7)",
            labels={"figure": "backcopy cost vs T (Fig. 3 left)"},
        ),
        figure_condition3=report(
            paths.cost_figure("condition3"),
            caption="../report/costs_condition3.rst",
            category="Costs of sinks vs diagonals (§7)",
            labels={"figure": "condition (3) of Theorem 7.1"},
        ),
    params:
        condition3=config["costs"]["condition3"],
        n_dormant=backcopy_params(config)["n_dormant"],
    priority: PRIORITY["summarize_backcopy"]
    log:
        paths.log("summarize_backcopy", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    script:
        "../scripts/step.py"


rule summarize_copypaste:
    input:
        rows=expand(
            paths.cost_run("copypaste"),
            pattern=config["costs"]["copypaste"]["patterns"],
            n=config["costs"]["copypaste"]["n_dormant"],
            delta=config["costs"]["copypaste"]["delta"],
            seed=config["costs"]["copypaste"]["seeds"],
        ),
    output:
        table_runs=paths.cost_table("copypaste_runs"),
        table_runs_csv=paths.cost_table("copypaste_runs", "csv"),
        figure_copypaste_costs=report(
            paths.cost_figure("copypaste_costs"),
            caption="../report/costs_copypaste.rst",
            category="Costs of sinks vs diagonals (§7)",
            labels={"figure": "copy-paste cost and Theorem D.1 bounds (Fig. 3 right)"},
        ),
    priority: PRIORITY["summarize_copypaste"]
    log:
        paths.log("summarize_copypaste", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    script:
        "../scripts/step.py"


rule summarize_backcopy_e2e:
    input:
        rows=expand(
            paths.cost_run("backcopy_e2e"),
            pattern=config["costs"]["backcopy"]["end_to_end"]["patterns"],
            T=config["costs"]["backcopy"]["end_to_end"]["T"],
            seed=config["costs"]["backcopy"]["end_to_end"]["seeds"],
        ),
    output:
        table=paths.cost_table("backcopy_end_to_end"),
        table_csv=paths.cost_table("backcopy_end_to_end", "csv"),
    priority: PRIORITY["summarize_backcopy_e2e"]
    log:
        paths.log("summarize_backcopy_e2e", "all"),
    conda:
        "../../envs/sinkscope.yaml"
    script:
        "../scripts/step.py"
