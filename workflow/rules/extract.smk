# Extraction of activations to HDF5: the GPU rule (it runs on the CPU where no GPU is visible).


rule extract_activations:
    input:
        model_dir=paths.model_dir,
        tokens=paths.tokens,
    output:
        activations=paths.activations,
    params:
        # only what the file's contents depend on: no description, device, batch size or
        # overlap (sinkscope.config.DESCRIPTIVE_KEYS, EXTRACTION_RUN_KEYS; read from the config)
        model_entry=lambda wc: model_entry(config, wc.model),
        dataset_entry=lambda wc: dataset_entry(config, wc.dataset),
        extraction=extraction_content(config),
    priority: priority("extract_activations")
    log:
        paths.log("extract_activations", "{model}/{dataset}"),
    conda:
        conda_env("extract_activations")
    threads: job_threads("extract_activations")
    resources:
        **job_resources("extract_activations"),
    script:
        "../scripts/step.py"
