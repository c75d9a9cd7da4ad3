# Per OWL recipe (profile: owl): its per-block sparsities from the dense chain's Hessians of every block
# (thanos/stages/owl_plan.py). With chain: sequential, this asks for the dense chain's stores of blocks >= 1
# too (one dense propagate and capture per block, shared by every OWL recipe of the model).

if OWL_RECIPES:

    rule owl:
        input:
            unpack(owl_inputs),
        output:
            PATHS.owl("{model}", "{recipe}"),
        wildcard_constraints:
            recipe=_alternation(OWL_RECIPES),
        params:
            model=model_path,
            recipe=recipe_json,
        priority: PRUNING_FIRST
        log:
            f"{PATHS.logs}/{{model}}/{{recipe}}/owl.log",
        shell:
            "python -m thanos owl --model {params.model:q} --hessians {input.hessians:q}"
            " --recipe {params.recipe:q} --model-info {input.info:q} --out {output:q} > {log:q} 2>&1"
