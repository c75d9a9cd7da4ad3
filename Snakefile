# Thanos LLM pruning workflow: prune Hugging Face causal LMs with a grid of recipes, resumably.
# All logic lives in the `thanos` package; rules call `python -m thanos <stage>` (docs/cli.md).
#
#   snakemake --cores 2                                  # the offline demo (config.yaml)
#   snakemake --cores 8 --configfile workflow/configs/paper.yaml --resources gpu=4


import sys
import time

from thanos.jobs.interrupt import watch as watch_interrupt
from thanos.jobs.joblogs import summary as failed_jobs_summary
from thanos.jobs.worker import for_this_run as start_job_worker

STARTED = time.time()
# Ctrl-C: the interrupted jobs are not reported as errors, and the run ends with one line saying how to resume
INTERRUPT = watch_interrupt(logger, workflow)


include: "workflow/rules/config.smk"
include: "workflow/rules/inputs.smk"
include: "workflow/rules/pruning_inputs.smk"
include: "workflow/rules/targets.smk"
include: "workflow/rules/demo.smk"
include: "workflow/rules/calibration.smk"
include: "workflow/rules/capture.smk"
include: "workflow/rules/owl.smk"
include: "workflow/rules/depth.smk"
include: "workflow/rules/prune.smk"
include: "workflow/rules/assemble.smk"
include: "workflow/rules/combined.smk"
include: "workflow/rules/search.smk"
include: "workflow/rules/distill.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_targets(),
    default_target: True


onstart:
    # a local run's `python -m thanos` jobs run in forks of one warm process: Python and its imports
    # start once per run, not once per job (thanos/jobs/worker.py); the evaluation stages' imports only in
    # a run that evaluates
    evaluates = config["perplexity"]["enabled"] or config["zeroshot"]["enabled"]
    logger.info(start_job_worker(workflow.local_exec, config["threads"], evaluates))


onerror:
    # Snakemake itself only names the failed jobs' logs: show their last lines, where the error is (not for
    # the jobs a Ctrl-C ended)
    failed = "" if INTERRUPT.interrupted else failed_jobs_summary(log)
    if failed:
        print(failed, file=sys.stderr)


onsuccess:
    # every model's perplexities, where the tables and figures are, and the paper's orderings when checked
    from thanos.report.closing import closing_summary  # pandas: imported only here, not at every parse

    summary = closing_summary(PATHS.root, PATHS.tables, PATHS.figures, STARTED, shown_variants())
    if summary:
        print(summary)
