# Models built by the workflow: the offline demo (demo-data -> train-demo), tiny random models and real
# pretrained models converted from a pinned PyPI wheel (real-model).

if DEMO["enabled"]:

    rule demo_data:
        output:
            directory(DEMO["data_dir"]),
        log:
            f"{PATHS.logs}/demo/demo_data.log",
        shell:
            "python -m thanos demo-data --out-dir {output:q} > {log:q} 2>&1"

    rule train_demo:
        input:
            DEMO["data_dir"],
        output:
            directory(DEMO["model_dir"]),
        log:
            f"{PATHS.logs}/demo/train_demo.log",
        threads: workflow.cores
        shell:
            "OMP_NUM_THREADS={threads} python -m thanos train-demo --data-dir {input:q} --no-held-out"
            " --out {output:q} > {log:q} 2>&1"


if TINY_MODELS:

    rule make_tiny_model:
        output:
            directory("{tiny_path}"),
        wildcard_constraints:
            tiny_path=_alternation(TINY_MODELS),
        params:
            options=tiny_model_options,
        log:
            f"{PATHS.logs}/tiny/{{tiny_path}}.log",
        shell:
            "python -m thanos make-tiny-model {params.options} --out {output:q} > {log:q} 2>&1"


if REAL_MODELS:

    rule real_model:
        output:
            directory("{real_path}"),
        wildcard_constraints:
            real_path=_alternation(REAL_MODELS),
        params:
            options=real_model_options,
        log:
            f"{PATHS.logs}/real/{{real_path}}.log",
        shell:
            "python -m thanos real-model {params.options} --out {output:q} > {log:q} 2>&1"
