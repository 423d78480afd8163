"""``python3 -m slurm_hooks``.

``python3 -m slurm_hooks hook <phase>`` is what the prolog, epilog and
healthcheck shims exec: it must not import click or requests, so it is
dispatched here before the CLI is loaded.
"""

from __future__ import annotations

import sys


def run() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "hook":
        import gc

        from slurm_hooks.agent.hook import main as hook_main

        # A short-lived hook allocates little garbage worth collecting: cyclic
        # GC passes during start-up cost more than they free.
        gc.disable()
        rc = hook_main(sys.argv[2:])
        gc.freeze()
        return rc
    from slurm_hooks.cli import main

    main(prog_name="slurm-hooks")
    return 0


if __name__ == "__main__":
    sys.exit(run())
