# Per chain and block: Hessians from one dense pass of block l (capture) and the inputs of block l+1
# (propagate, through the pruned block l for a sequential recipe chain, the dense block for "dense").


rule capture:
    input:
        unpack(capture_inputs),
    output:
        retain(directory(PATHS.store("{model}", "{chain}", "hessians", "{l}")), "hessians"),
    params:
        model=model_path,
        compute_dtype=compute_dtype,
    priority: PRUNING_FIRST
    log:
        f"{PATHS.logs}/{{model}}/chains/{{chain}}/capture_{{l}}.log",
    threads: config["threads"]
    resources:
        gpu=JOB_GPUS,
    shell:
        "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos capture --model {params.model:q} --block {wildcards.l}"
        " --inputs {input.inputs:q} --device $THANOS_WF_DEVICE --compute-dtype {params.compute_dtype}"
        " --out {output:q} > {log:q} 2>&1"


rule propagate:
    input:
        unpack(propagate_inputs),
    output:
        retain(directory(PATHS.store("{model}", "{chain}", "inputs", "{l}")), "activations"),
    wildcard_constraints:
        l=r"[1-9]\d*",
    params:
        model=model_path,
        previous=previous_block,
        pruned=pruned_dir_option,
        compute_dtype=compute_dtype,
    priority: PRUNING_FIRST
    log:
        f"{PATHS.logs}/{{model}}/chains/{{chain}}/propagate_{{l}}.log",
    threads: config["threads"]
    resources:
        gpu=JOB_GPUS,
    shell:
        "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos propagate --model {params.model:q}"
        " --block {params.previous} --inputs {input.inputs:q} {params.pruned} --device $THANOS_WF_DEVICE"
        " --compute-dtype {params.compute_dtype}"
        " --out {output:q} > {log:q} 2>&1"
