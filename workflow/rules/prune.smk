# Per recipe: prune its blocks' linear layers, as config granularity says: one job per layer (layer, the
# default), one per block (block), or one per recipe (recipe: `python -m thanos chain` runs capture,
# prune and propagate of every block in one process, same files byte for byte; its output is the summary
# written after the last block, so a killed job keeps its finished blocks and resumes there). Recipe
# options are params, so editing a recipe reruns its jobs only. The pruned layers are kept per calibration
# (the {calibration} wildcard: its key, or `uncalibrated` for a recipe that reads none: Layout.pruned).

if GRANULARITY == "layer":

    rule prune_layer:
        input:
            unpack(prune_inputs),
        output:
            weight=retain(PATHS.pruned_layer("{model}", "{recipe}", "{l}", "{layer}", "safetensors", "{calibration}"), "pruned_layers"),
            stats=retain(PATHS.pruned_layer("{model}", "{recipe}", "{l}", "{layer}", "json", "{calibration}"), "pruned_layers"),
        params:
            model=model_path,
            recipe=recipe_json,
            hessians=hessians_option,
            out_dir=prune_out_dir,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{recipe}}/{{calibration}}/prune/block{{l}}/{{layer}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos prune --model {params.model:q}"
            " --block {wildcards.l} --layers {wildcards.layer} {params.hessians} --recipe {params.recipe:q}"
            " --device $THANOS_WF_DEVICE --out-dir {params.out_dir:q} > {log:q} 2>&1"

elif GRANULARITY == "block":

    rule prune_block:
        input:
            unpack(prune_inputs),
        output:
            retain(directory(PATHS.pruned_block("{model}", "{recipe}", "{l}", "{calibration}")), "pruned_layers"),
        params:
            model=model_path,
            recipe=recipe_json,
            hessians=hessians_option,
            layers=block_layers,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{recipe}}/{{calibration}}/prune/block{{l}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos prune --model {params.model:q}"
            " --block {wildcards.l} --layers {params.layers} {params.hessians} --recipe {params.recipe:q}"
            " --device $THANOS_WF_DEVICE --out-dir {output:q} > {log:q} 2>&1"

elif GRANULARITY == "recipe":

    rule prune_recipe:
        input:
            unpack(recipe_inputs),
        output:
            PATHS.chain_summary("{model}", "{recipe}", "{calibration}"),
        params:
            model=model_path,
            recipe=recipe_json,
            stores=recipe_store_options,
            root=recipe_pruned_root,
            compute_dtype=compute_dtype,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{recipe}}/{{calibration}}/prune_recipe.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos chain --model {params.model:q}"
            " --recipe {params.recipe:q} {params.stores} --pruned-root {params.root:q} --device $THANOS_WF_DEVICE"
            " --compute-dtype {params.compute_dtype}"
            " --out {output:q} > {log:q} 2>&1"
