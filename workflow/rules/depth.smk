# Per depth:K recipe: which whole blocks go, and the linear maps that replace them (thanos/stages/depth/blocks.py),
# from the dense chain's inputs of every block and the last block's output, computed once per model and
# shared with OWL and the other depth recipes (rules/capture.smk); rule assemble then writes the model
# without those blocks. The same depth.json as `thanos prune-model` (the engine's step, given these stores).

if DEPTH_RECIPES:

    rule depth:
        input:
            unpack(depth_inputs),
        output:
            PATHS.depth("{model}", "{recipe}", "{calibration}"),
        wildcard_constraints:
            recipe=_alternation(DEPTH_RECIPES),
        params:
            model=model_path,
            recipe=recipe_json,
            dense_dir=lambda wildcards: PATHS.chain_dir(wildcards.model, DENSE),
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{recipe}}/{{calibration}}/depth.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos depth --model {params.model:q}"
            " --recipe {params.recipe:q} --dense-dir {params.dense_dir:q} --model-info {input.info:q}"
            " --device $THANOS_WF_DEVICE --out {output:q} > {log:q} 2>&1"
