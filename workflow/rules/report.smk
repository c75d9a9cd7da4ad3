# Tables and figures from whatever results exist (rebuilt when any model or evaluation changes).
# `snakemake --report report.html` (or report.zip for large runs) embeds them with their captions.


report: "../report/workflow.rst"

# reading the results' JSON files and drawing them: where Snakemake runs, not a cluster job
localrules:
    tables,
    figures,


rule tables:
    input:
        report_inputs,
    output:
        report(
            directory(PATHS.tables),
            patterns=["{name}.csv"],
            caption="../report/tables.rst",
            category="Tables",
        ),
    params:
        results=results_dir,
        only=shown_variants,
    log:
        f"{PATHS.logs}/tables.log",
    shell:
        "python -m thanos tables --results {params.results:q} --only {params.only:q} --out-dir {output:q}"
        " > {log:q} 2>&1"


rule figures:
    input:
        report_inputs,
    output:
        report(
            directory(PATHS.figures),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    params:
        results=results_dir,
        only=shown_variants,
    log:
        f"{PATHS.logs}/figures.log",
    threads: FIGURE_PROCESSES
    shell:
        "python -m thanos figures --results {params.results:q} --only {params.only:q} --out-dir {output:q}"
        " --processes {threads} > {log:q} 2>&1"
