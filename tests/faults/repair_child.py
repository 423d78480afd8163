"""A child process for the repair kill test (test_repair_kill_lab.py): a REAL
entry point with ONE repair step patched, in this process only, to kill -9
the process (the mechanism of child.py, reused).

    python tests/faults/repair_child.py <step> healthcheck
    python tests/faults/repair_child.py <step> worker <incident file>

``healthcheck`` is the node's HealthCheckProgram hook (``python -m slurm_hooks
hook healthcheck``), ``worker`` the detached grace/repair worker (``python -m
slurm_hooks.agent.worker``), both from the node's config (SLURM_HOOKS_CONFIG,
SLURMD_NODENAME).  ``noworker``: every engine this process builds starts no
worker (the test runs the worker itself, armed).  The product reads no test
switch: the patching happens here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import child  # noqa: E402 - the fault suite's die() and _at()

from slurm_hooks.act.engine import Engine  # noqa: E402
from slurm_hooks.act.notify.webhook import WebhookSink  # noqa: E402
from slurm_hooks.agent import worker  # noqa: E402
from slurm_hooks.detect.probes import gpu_reset  # noqa: E402
from slurm_hooks.slurm.cli_backend import CliClient  # noqa: E402

#: step -> (object, attribute, kill after the call returned)
STEPS = {
    "reset:before": (gpu_reset, "reset_gpu", False),
    "reset:after": (gpu_reset, "reset_gpu", True),
    "reboot:before": (CliClient, "reboot", False),
    "reboot:after": (CliClient, "reboot", True),
    # acceptance ran, its verdict not journalled yet
    "accept:during": (worker, "acceptance_here", True),
    "resume:before": (CliClient, "resume", False),
    "resume:after": (CliClient, "resume", True),
    # the ticket webhook (the [repair] ticket_url; no other webhook is set)
    "ticket:before": (WebhookSink, "send", False),
    "ticket:after": (WebhookSink, "send", True),
}


def arm(step: str) -> None:
    if step == "noworker":
        real_init = Engine.__init__

        def init(self, *a, **k):  # type: ignore[no-untyped-def]
            real_init(self, *a, **k)
            self.spawn = None

        Engine.__init__ = init  # type: ignore[method-assign]
    elif step != "none":
        obj, name, after_call = STEPS[step]
        child._at(obj, name, child.die, after_call=after_call)


def main(argv: list[str]) -> int:
    step, process, rest = argv[0], argv[1], argv[2:]
    arm(step)
    if process == "healthcheck":
        from slurm_hooks.agent import hook

        return hook.main(["healthcheck"])
    if process == "worker":
        return worker.main(rest)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
