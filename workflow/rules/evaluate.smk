# Per model and variant (a recipe, or "dense" for the unpruned model): perplexity and zero-shot accuracy.
# With both enabled, one job (rule evaluate) loads the model once and writes both files; with one of them,
# its own rule. The files are the same either way.


if "perplexity" in evaluations() and "zeroshot" in evaluations():

    rule evaluate:
        input:
            model=eval_model_input,
            source=perplexity_source_input,
            include=zeroshot_include_input,
        output:
            ppl=PATHS.evaluation("{model}", "{variant}", "perplexity"),
            zeroshot=PATHS.evaluation("{model}", "{variant}", "zeroshot"),
        params:
            dtype=compute_dtype,
            model=eval_model,
            source=config["perplexity"]["source"],
            ppl_options=perplexity_options,
            zeroshot_options=zeroshot_options,
        log:
            f"{PATHS.logs}/{{model}}/{{variant}}/evaluate.log",
        threads: config["threads"]
        resources:
            gpu=EVAL_JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_ZEROSHOT_ENV $THANOS_WF_EVAL_GPU python -m thanos evaluate"
            " --model {params.model:q} --source {params.source:q} {params.ppl_options}"
            " --ppl-batch-size $THANOS_WF_PPL_BATCH {params.zeroshot_options}"
            " --zeroshot-batch-size $THANOS_WF_ZEROSHOT_BATCH $THANOS_WF_EVAL_PLACEMENT"
            " --dtype {params.dtype}"
            " --ppl-out {output.ppl:q} --zeroshot-out {output.zeroshot:q} > {log:q} 2>&1"

else:

    rule perplexity:
        input:
            model=eval_model_input,
            source=perplexity_source_input,
        output:
            PATHS.evaluation("{model}", "{variant}", "perplexity"),
        params:
            dtype=compute_dtype,
            model=eval_model,
            source=config["perplexity"]["source"],
            options=perplexity_options,
        log:
            f"{PATHS.logs}/{{model}}/{{variant}}/perplexity.log",
        threads: config["threads"]
        resources:
            gpu=EVAL_JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_EVAL_GPU python -m thanos perplexity --model {params.model:q}"
            " --source {params.source:q} {params.options} --batch-size $THANOS_WF_PPL_BATCH"
            " $THANOS_WF_EVAL_PLACEMENT --dtype {params.dtype} --out {output:q} > {log:q} 2>&1"


    rule zeroshot:
        input:
            model=eval_model_input,
            include=zeroshot_include_input,
        output:
            PATHS.evaluation("{model}", "{variant}", "zeroshot"),
        params:
            dtype=compute_dtype,
            model=eval_model,
            options=zeroshot_options,
        log:
            f"{PATHS.logs}/{{model}}/{{variant}}/zeroshot.log",
        threads: config["threads"]
        resources:
            gpu=EVAL_JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_ZEROSHOT_ENV $THANOS_WF_EVAL_GPU python -m thanos zeroshot"
            " --model {params.model:q} {params.options} --batch-size $THANOS_WF_ZEROSHOT_BATCH"
            " $THANOS_WF_EVAL_PLACEMENT --dtype {params.dtype}"
            " --out {output:q} > {log:q} 2>&1"
