# Synthetic cost experiments of §7 (Theorems 7.1, 7.2, D.1; Figure 3): no pretrained model.
# Every (task, pattern, size, seed) run is its own job, so Snakemake or SLURM runs them in parallel.
# Tables, figures and captions: the registry of outputs (sinkscope.outputs).


rule cost_toy:
    output:
        **outputs_of("cost_toy"),
    params:
        T=config["costs"]["toy_T"],
    priority: priority("cost_toy")
    log:
        paths.log("cost_toy", "toy"),
    conda:
        conda_env("cost_toy")
    resources:
        **job_resources("cost_toy"),
    script:
        "../scripts/step.py"


rule cost_backcopy_run:
    output:
        row=paths.cost_run("backcopy"),
    params:
        params=config["costs"]["backcopy"]["params"],
    priority: priority("cost_backcopy_run")
    log:
        paths.log("cost_backcopy_run", "{pattern}_T{T}_seed{seed}"),
    conda:
        conda_env("cost_backcopy_run")
    resources:
        **job_resources("cost_backcopy_run"),
    script:
        "../scripts/step.py"


rule cost_backcopy_e2e:
    output:
        row=paths.cost_run("backcopy_e2e"),
    params:
        params=backcopy_end_to_end_params(config),
    priority: priority("cost_backcopy_e2e")
    log:
        paths.log("cost_backcopy_e2e", "{pattern}_T{T}_seed{seed}"),
    conda:
        conda_env("cost_backcopy_e2e")
    resources:
        **job_resources("cost_backcopy_e2e"),
    script:
        "../scripts/step.py"


rule cost_copypaste_run:
    output:
        row=paths.cost_run("copypaste"),
    params:
        params=config["costs"]["copypaste"]["params"],
    priority: priority("cost_copypaste_run")
    log:
        paths.log("cost_copypaste_run", "{pattern}_n{n}_delta{delta}_seed{seed}"),
    conda:
        conda_env("cost_copypaste_run")
    resources:
        **job_resources("cost_copypaste_run"),
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
        **outputs_of("summarize_backcopy"),
    params:
        condition3=config["costs"]["condition3"],
        n_dormant=backcopy_params(config)["n_dormant"],
    priority: priority("summarize_backcopy")
    log:
        paths.log("summarize_backcopy", "all"),
    conda:
        conda_env("summarize_backcopy")
    resources:
        **job_resources("summarize_backcopy"),
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
        **outputs_of("summarize_copypaste"),
    priority: priority("summarize_copypaste")
    log:
        paths.log("summarize_copypaste", "all"),
    conda:
        conda_env("summarize_copypaste")
    resources:
        **job_resources("summarize_copypaste"),
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
        **outputs_of("summarize_backcopy_e2e"),
    priority: priority("summarize_backcopy_e2e")
    log:
        paths.log("summarize_backcopy_e2e", "all"),
    conda:
        conda_env("summarize_backcopy_e2e")
    resources:
        **job_resources("summarize_backcopy_e2e"),
    script:
        "../scripts/step.py"
