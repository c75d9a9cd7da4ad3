# Per distilled recipe (a recipe with `distill:`): its pruned recipe's model trained toward the dense model on
# text (`thanos distill`, docs/distillation.md). The checkpoints (PATHS.distill_work) are not an output: they
# outlive a failed or killed job, and the job started again continues from the last one; once the model is
# written the job deletes them unless retention.distill_checkpoints keeps them.

if DISTILLED:

    rule distill:
        input:
            student=distill_student,
            teacher=model_dir_input,
            source=distill_source_input,
        output:
            directory(PATHS.model_dir("{model}", "{distilled}")),
        params:
            teacher=model_path,
            options=distill_options,
            work=distill_work,
            flags=distill_flags,
            dtype=compute_dtype,
            omp=distill_threads,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{distilled}}/distill.log",
        threads: config["threads"]
        resources:
            gpu=DISTILL_JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={params.omp} $THANOS_WF_DISTILL_GPU $THANOS_WF_DISTILL -m thanos distill"
            " --student {input.student:q} --teacher {params.teacher:q} {params.options}"
            " --work {params.work:q} {params.flags} --device $THANOS_WF_DEVICE --dtype {params.dtype} --no-progress"
            " --out {output:q} > {log:q} 2>&1"
