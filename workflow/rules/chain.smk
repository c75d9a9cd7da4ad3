# granularity chain: one job per (model, recipe) runs the recipe's whole chain in one process (python -m
# thanos chain): per block capture (sequential chain, l >= 1), prune all layers, propagate. Same stores and
# pruned files as the per-block jobs; the job's output is the summary written after the last block, so a
# killed job keeps its finished blocks and resumes there. Block 0 (and every block of the dense chain)
# reads the shared dense stores of rules embed/capture/propagate.

if GRANULARITY == "chain":

    rule prune_chain:
        input:
            unpack(chain_inputs),
        output:
            f"{R}/{{model}}/{{recipe}}/pruned/chain.json",
        params:
            model=model_path,
            options=recipe_options,
            stores=chain_options,
            root=chain_pruned_root,
        log:
            f"{R}/logs/{{model}}/{{recipe}}/prune_chain.log",
        threads: config["threads"]
        resources:
            gpu=JOB_GPUS,
        shell:
            "OMP_NUM_THREADS={threads} $THANOS_WF_GPU python -m thanos chain --model {params.model:q}"
            " {params.options} {params.stores} --pruned-root {params.root} --device $THANOS_WF_DEVICE"
            " --out {output} > {log} 2>&1"
