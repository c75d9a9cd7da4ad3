# Per model: model facts (a checkpoint), calibration tokens, block 0 inputs. Shared by all recipes.

# The model's facts and its calibration tokens run where Snakemake runs (on a cluster: the login node, which
# can reach the hub when compute nodes cannot): seconds of work each, not worth a job's queue wait.
localrules:
    model_info,
    calibrate,


checkpoint model_info:
    input:
        model=model_dir_input,
    output:
        PATHS.model_info("{model}"),
    params:
        model=model_path,
    log:
        f"{PATHS.logs}/{{model}}/model_info.log",
    shell:
        "python -m thanos model-info --model {params.model:q} --out {output:q} > {log:q} 2>&1"


rule calibrate:
    input:
        model=model_dir_input,
        source=calibration_source_input,
    output:
        directory(PATHS.tokens("{model}")),
    params:
        model=model_path,
        source=config["calibration"]["source"],
        nsamples=config["calibration"]["nsamples"],
        seqlen=config["calibration"]["seqlen"],
        seed=config["calibration"]["seed"],
        text_field=config["calibration"]["text_field"],
    priority: PRUNING_FIRST
    log:
        f"{PATHS.logs}/{{model}}/calibrate.log",
    shell:
        "python -m thanos calibrate --model {params.model:q} --source {params.source:q}"
        " --nsamples {params.nsamples} --seqlen {params.seqlen} --seed {params.seed}"
        " --text-field {params.text_field:q} --out {output:q} > {log:q} 2>&1"


rule embed:
    input:
        model=model_dir_input,
        tokens=PATHS.tokens("{model}"),
    output:
        retain(directory(PATHS.store("{model}", DENSE, "inputs", 0)), "activations"),
    params:
        model=model_path,
        compute_dtype=compute_dtype,
    priority: PRUNING_FIRST
    log:
        f"{PATHS.logs}/{{model}}/embed.log",
    threads: config["threads"]
    resources:
        gpu=JOB_GPUS,
    shell:
        "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos embed --model {params.model:q} --tokens {input.tokens:q}"
        " --device $THANOS_WF_DEVICE --compute-dtype {params.compute_dtype} --out {output:q}"
        " > {log:q} 2>&1"
