# The claims table: every claim of the three studies checked against the summary tables of the
# analyses this config runs (sinkscope.claims); claims of analyses not run are "not applicable".
# The same rule writes the observations (sinkscope.claims.observations): what the figures show
# about the models but no claim states, a section of claims.md and the table
# summary/observations.


rule claims:
    input:
        **claims_inputs(),
    output:
        markdown=report(
            paths.claims("md"),
            caption="../report/claims.rst",
            category="0 Claims",
            labels={"table": "claims (markdown)"},
        ),
        table=report(
            paths.claims("parquet"),
            caption="../report/claims.rst",
            category="0 Claims",
            labels={"table": "claims (parquet)"},
        ),
        table_csv=report(
            paths.claims("csv"),
            caption="../report/claims.rst",
            category="0 Claims",
            labels={"table": "claims (CSV)"},
        ),
        rst=paths.claims("rst"),
        observations=report(
            paths.observations("parquet"),
            caption="../report/observations.rst",
            category="0 Claims",
            labels={"table": "observations (parquet)"},
        ),
        observations_csv=report(
            paths.observations("csv"),
            caption="../report/observations.rst",
            category="0 Claims",
            labels={"table": "observations (CSV)"},
        ),
    params:
        tolerances=config["claims"],
        models=list(config["models"]),
    priority: priority("claims")
    log:
        paths.log("claims", "all"),
    conda:
        conda_env("claims")
    resources:
        **job_resources("claims"),
    script:
        "../scripts/step.py"
