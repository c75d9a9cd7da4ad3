import sys

from thanos.jobs.worker import forward

code = forward(sys.argv[1:])  # a job of `thanos prune-model`: run by its warm worker
if code is None:
    from thanos.cli import exit_now, main

    exit_now(main())
sys.exit(code)
