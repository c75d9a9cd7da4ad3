# Per recipe: prune block l's linear layers, one job per layer (granularity: layer, the default) or one
# job per block (granularity: block); granularity chain: workflow/rules/chain.smk. Recipe options are params, so editing a recipe reruns its jobs only.

if GRANULARITY == "layer":

    rule prune_layer:
        input:
            unpack(prune_inputs),
        output:
            weight=retain(f"{R}/{{model}}/{{recipe}}/pruned/block{{l}}/{{layer}}.safetensors", "pruned_layers"),
            stats=retain(f"{R}/{{model}}/{{recipe}}/pruned/block{{l}}/{{layer}}.json", "pruned_layers"),
        params:
            model=model_path,
            options=recipe_options,
            hessians=hessians_option,
            out_dir=prune_out_dir,
        log:
            f"{R}/logs/{{model}}/{{recipe}}/prune/block{{l}}/{{layer}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos prune --model {params.model:q}"
            " --block {wildcards.l} --layers {wildcards.layer} {params.hessians} {params.options}"
            " --device $THANOS_WF_DEVICE --out-dir {params.out_dir} > {log} 2>&1"

elif GRANULARITY == "block":

    rule prune_block:
        input:
            unpack(prune_inputs),
        output:
            retain(directory(f"{R}/{{model}}/{{recipe}}/pruned/block{{l}}"), "pruned_layers"),
        params:
            model=model_path,
            options=recipe_options,
            hessians=hessians_option,
            layers=block_layers,
        log:
            f"{R}/logs/{{model}}/{{recipe}}/prune/block{{l}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos prune --model {params.model:q}"
            " --block {wildcards.l} --layers {params.layers} {params.hessians} {params.options}"
            " --device $THANOS_WF_DEVICE --out-dir {output} > {log} 2>&1"
