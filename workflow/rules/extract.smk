# Extraction of activations to HDF5: the GPU rule (it runs on the CPU where no GPU is visible).


rule extract_activations:
    input:
        model_dir=paths.model_dir,
        tokens=paths.tokens,
    output:
        activations=paths.activations,
    params:
        model_entry=lambda wc: config["models"][wc.model],
        dataset_entry=lambda wc: dataset_entry(config, wc.dataset),
        extraction=config["extraction"],
    priority: PRIORITY["extract_activations"]
    log:
        paths.log("extract_activations", "{model}/{dataset}"),
    conda:
        "../../envs/sinkscope.yaml"
    threads: PAIR_THREADS
    resources:
        **job_resources("extract_activations"),
    script:
        "../scripts/step.py"
