# Per model and variant (a recipe, or "dense" for the unpruned model): perplexity and zero-shot accuracy.


rule perplexity:
    input:
        model=eval_model_input,
        source=perplexity_source_input,
    output:
        PATHS.evaluation("{model}", "{variant}", "perplexity"),
    params:
        model=eval_model,
        source=config["perplexity"]["source"],
        options=perplexity_options,
        batch_size=config["perplexity"]["batch_size"],
    log:
        f"{PATHS.logs}/{{model}}/{{variant}}/perplexity.log",
    threads: config["threads"]
    resources:
        gpu=EVAL_JOB_GPUS,
    shell:
        "OMP_NUM_THREADS={threads} $THANOS_WF_EVAL_GPU python -m thanos perplexity --model {params.model:q}"
        " --source {params.source:q} {params.options} --batch-size {params.batch_size}"
        " $THANOS_WF_EVAL_PLACEMENT --out {output:q} > {log:q} 2>&1"


rule zeroshot:
    input:
        model=eval_model_input,
        include=zeroshot_include_input,
    output:
        PATHS.evaluation("{model}", "{variant}", "zeroshot"),
    params:
        model=eval_model,
        options=zeroshot_options,
        batch_size=config["zeroshot"]["batch_size"],
    log:
        f"{PATHS.logs}/{{model}}/{{variant}}/zeroshot.log",
    threads: config["threads"]
    resources:
        gpu=EVAL_JOB_GPUS,
    shell:
        "OMP_NUM_THREADS={threads} $THANOS_WF_ZEROSHOT_ENV $THANOS_WF_EVAL_GPU python -m thanos zeroshot"
        " --model {params.model:q} {params.options} --batch-size {params.batch_size} $THANOS_WF_EVAL_PLACEMENT"
        " --out {output:q} > {log:q} 2>&1"
