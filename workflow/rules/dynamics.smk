# Training dynamics of the companion value-softmax paper (no pretrained model): gradient flow of
# L(V softmax(a)) (Theorem 3.3), sink heads on the induction task per attention function (Tables
# 1-2), one-token flips on the classification task (Table 3). Every run is its own job (grids in
# sinkscope.dynamics.grids, chosen by config["dynamics"]; paths in sinkscope.paths); a summary rule
# per part writes the tables and figures. Each run trains on one thread, so Snakemake runs as many
# at once as it has cores.
from sinkscope.dynamics.grids import dynamics_jobs, dynamics_minutes, run_size

DYNAMICS_JOBS = dynamics_jobs(config["dynamics"])
# the size of each part's runs in words, for the figure captions (workflow/report/dynamics_*.rst)
DYNAMICS_RUN_SIZE = {part: run_size(part, jobs.values()) for part, jobs in DYNAMICS_JOBS.items()}
DYNAMICS_MINUTES = dynamics_minutes(config["dynamics"])
DYNAMICS_RUN_OUTPUTS = paths.dynamics_run_outputs()
DYNAMICS_SUMMARY_INPUTS = paths.dynamics_summary_inputs(DYNAMICS_JOBS)


rule dynamics_value_softmax_run:
    output:
        **DYNAMICS_RUN_OUTPUTS["value_softmax"],
    params:
        spec=lambda wc: DYNAMICS_JOBS["value_softmax"][wc.run],
    priority: priority("dynamics_value_softmax_run")
    log:
        paths.log("dynamics_value_softmax_run", "{run}"),
    conda:
        conda_env("dynamics_value_softmax_run")
    threads: 1
    resources:
        **job_resources("dynamics_value_softmax_run", minutes=DYNAMICS_MINUTES["value_softmax"]),
    script:
        "../scripts/step.py"


rule dynamics_induction_run:
    output:
        **DYNAMICS_RUN_OUTPUTS["induction"],
    params:
        spec=lambda wc: DYNAMICS_JOBS["induction"][wc.run],
    priority: priority("dynamics_induction_run")
    log:
        paths.log("dynamics_induction_run", "{run}"),
    conda:
        conda_env("dynamics_induction_run")
    threads: 1
    resources:
        **job_resources("dynamics_induction_run", minutes=DYNAMICS_MINUTES["induction"]),
    script:
        "../scripts/step.py"


rule dynamics_classification_run:
    output:
        **DYNAMICS_RUN_OUTPUTS["classification"],
    params:
        spec=lambda wc: DYNAMICS_JOBS["classification"][wc.run],
    priority: priority("dynamics_classification_run")
    log:
        paths.log("dynamics_classification_run", "{run}"),
    conda:
        conda_env("dynamics_classification_run")
    threads: 1
    resources:
        **job_resources("dynamics_classification_run", minutes=DYNAMICS_MINUTES["classification"]),
    script:
        "../scripts/step.py"


rule summarize_dynamics_value_softmax:
    input:
        **DYNAMICS_SUMMARY_INPUTS["value_softmax"],
    output:
        **outputs_of("summarize_dynamics_value_softmax"),
        timing=paths.dynamics_timing("value_softmax"),
    params:
        run_size=DYNAMICS_RUN_SIZE["value_softmax"],
    priority: priority("summarize_dynamics_value_softmax")
    log:
        paths.log("summarize_dynamics_value_softmax", "all"),
    conda:
        conda_env("summarize_dynamics_value_softmax")
    resources:
        **job_resources("summarize_dynamics_value_softmax"),
    script:
        "../scripts/step.py"


rule summarize_dynamics_induction:
    input:
        **DYNAMICS_SUMMARY_INPUTS["induction"],
    output:
        **outputs_of("summarize_dynamics_induction"),
        timing=paths.dynamics_timing("induction"),
    params:
        run_size=DYNAMICS_RUN_SIZE["induction"],
    priority: priority("summarize_dynamics_induction")
    log:
        paths.log("summarize_dynamics_induction", "all"),
    conda:
        conda_env("summarize_dynamics_induction")
    resources:
        **job_resources("summarize_dynamics_induction"),
    script:
        "../scripts/step.py"


rule summarize_dynamics_classification:
    input:
        **DYNAMICS_SUMMARY_INPUTS["classification"],
    output:
        **outputs_of("summarize_dynamics_classification"),
        timing=paths.dynamics_timing("classification"),
    params:
        run_size=DYNAMICS_RUN_SIZE["classification"],
    priority: priority("summarize_dynamics_classification")
    log:
        paths.log("summarize_dynamics_classification", "all"),
    conda:
        conda_env("summarize_dynamics_classification")
    resources:
        **job_resources("summarize_dynamics_classification"),
    script:
        "../scripts/step.py"
