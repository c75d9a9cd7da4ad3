# Tables and figures from whatever results exist (rebuilt when any model or evaluation changes).


rule tables:
    input:
        report_inputs,
    output:
        directory(f"{R}/tables"),
    params:
        results=results_dir,
    log:
        f"{R}/logs/tables.log",
    conda:
        CONDA_ENV
    shell:
        "python -m thanos tables --results {params.results} --out-dir {output} > {log} 2>&1"


rule figures:
    input:
        report_inputs,
    output:
        directory(f"{R}/figures"),
    params:
        results=results_dir,
    log:
        f"{R}/logs/figures.log",
    conda:
        CONDA_ENV
    shell:
        "python -m thanos figures --results {params.results} --out-dir {output} > {log} 2>&1"
