# Per recipe: original tensors + pruned layers -> HF model dir with pruning_report.json.


rule assemble:
    input:
        unpack(assemble_inputs),
    output:
        directory(PATHS.model_dir("{model}", "{recipe}")),
    params:
        model=model_path,
        info=info_file,
        recipe=recipe_json,
        calibration=calibration_option,
        pruned_root=pruned_root,
        intermediates=intermediates,
        max_shard_size=config["assemble"]["max_shard_size"],
        model_dir_format=MODEL_DIR_FORMAT,
    priority: PRUNING_FIRST
    log:
        f"{PATHS.logs}/{{model}}/{{recipe}}/assemble.log",
    shell:
        "python -m thanos assemble --model {params.model:q} --model-name {wildcards.model}"
        " --pruned-root {params.pruned_root:q} --recipe {params.recipe:q} {params.calibration}"
        " --model-info {params.info:q} --intermediates {params.intermediates}"
        " --max-shard-size {params.max_shard_size:q} --granularity \"$THANOS_WF_GRANULARITY\""
        " --granularity-reason \"$THANOS_WF_GRANULARITY_REASON\" --out {output:q} > {log:q} 2>&1"
