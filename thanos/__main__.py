"""``python -m thanos <command>``: the command run by the job worker of a Snakemake run when one is there
(``thanos.jobs.worker.forward``), else in this process (``thanos.cli.main``)."""

import sys

from thanos.jobs.worker import forward

code = forward(sys.argv[1:])  # a job of `thanos prune-model`: run by its warm worker
if code is None:
    from thanos.cli import exit_now, main

    exit_now(main())
sys.exit(code)
