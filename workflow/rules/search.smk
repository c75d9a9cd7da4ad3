# Per vocabulary recipe alone (vocab:0.3; a combined recipe's vocabulary is a part job, rules/combined.smk)
# and per size (params:0.25): one job
# runs `thanos prune-model` on the input model with the workflow's calibration, in the recipe's working
# directory results/{model}/{recipe}/work/{calibration key} (the command resumes from it), and writes the
# recipe's model: the same command a user runs, so the same model. A size's search first measures its
# candidates, each axis alone at the settings the search starts from (thanos.runner.size.planned_candidates,
# known once the model's facts are: the model_info checkpoint), as jobs of their own side by side (rule
# search_candidate: `thanos search-candidate`); the prune-model job then finds their measurements where its
# search looks (the ledger), measures the mixes they lead to, and writes the chosen recipe. Sizes that differ
# only in the parameters asked for (params:0.15, params:0.25) share one search: the first one's working
# directory and candidate jobs (SEARCH_OWNER); each later one runs after the one before it and reads the table.

ONE_COMMAND_LINE = (
    "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos {params.command} --model {params.model:q}"
    " {params.recipe} {params.calibration} --workdir {params.work:q} --cores {threads}"
    " --device $THANOS_WF_DEVICE --compute-dtype {params.compute_dtype} {params.candidate}"
    " --out {params.out:q} > {log:q} 2>&1"
)

if SEARCHES:

    rule search_candidate:
        input:
            unpack(one_command_inputs),
        output:
            PATHS.candidate("{model}", "{search}", "{candidate}"),
        params:
            command="search-candidate",
            model=model_path,
            recipe=one_command_flags,
            calibration=one_command_calibration,
            work=one_command_work,
            compute_dtype=compute_dtype,
            candidate=candidate_option,
            out=candidate_model,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{search}}/search/{{candidate}}.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            ONE_COMMAND_LINE


if ONE_COMMAND:

    rule one_command:
        input:
            unpack(one_command_inputs),
        output:
            directory(PATHS.model_dir("{model}", "{one}")),
        params:
            command="prune-model",
            model=model_path,
            recipe=one_command_flags,
            calibration=one_command_calibration,
            work=one_command_work,
            compute_dtype=compute_dtype,
            candidate="",
            out=one_command_out,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{one}}/prune-model.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            ONE_COMMAND_LINE
