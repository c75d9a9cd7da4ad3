# Per combined recipe (depth:4+neurons:0.3): one job per part, in the order the parts run (blocks, then
# heads, then neurons, then the vocabulary), each every stage of its part on the model the part before
# wrote (`python -m thanos combined-part`: the engine, as `thanos prune-model` runs each part), in its own
# working directory
# results/{model}/{recipe}/parts/{i}, which a killed job resumes from. The first part reads the workflow's
# tokens and dense chain of the input model; a later part calibrates on the model it reads. The earlier
# parts' models (parts/{i}/model) are deleted once the last part is written, unless retention.combined_parts
# keeps them; the last part writes the recipe's model with the report of the whole.

PART_COMMAND = (
    "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos combined-part --model {params.model:q}"
    " --recipe {params.recipe:q} --work {params.work:q} {params.calibration} {params.options}"
    " --model-name {wildcards.model} --max-shard-size {params.max_shard_size:q}"
    ' --granularity "$THANOS_WF_GRANULARITY" --granularity-reason "$THANOS_WF_GRANULARITY_REASON"'
    " --device $THANOS_WF_DEVICE --compute-dtype {params.compute_dtype} --out {output:q} > {log:q} 2>&1"
)

if COMBINED:

    rule combined_part:
        input:
            unpack(part_inputs),
        output:
            retain(directory(PATHS.part("{model}", "{combined}", "{part}") + "/model"), "combined_parts"),
        params:
            model=part_read_model,
            recipe=part_recipe,
            work=part_work,
            calibration=part_calibration,
            options=part_options,
            max_shard_size=config["assemble"]["max_shard_size"],
            compute_dtype=compute_dtype,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{combined}}/part{{part}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            PART_COMMAND

    rule combined_model:
        input:
            unpack(part_inputs),
        output:
            directory(PATHS.model_dir("{model}", "{combined}")),
        params:
            model=part_read_model,
            recipe=part_recipe,
            work=part_work,
            calibration=part_calibration,
            options=part_options,
            max_shard_size=config["assemble"]["max_shard_size"],
            compute_dtype=compute_dtype,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{combined}}/last_part.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            PART_COMMAND
