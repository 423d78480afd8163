"""A child process for the fault-injection suite: the real engine, with ONE
step patched (by the test, in this process only) to ``kill -9`` itself.

    python tests/faults/child.py run   <slurm.conf> <state> <webhook> <node> <step>
    python tests/faults/child.py worker <slurm.conf> <state> <webhook> <incident> <step>
    python tests/faults/child.py resume <slurm.conf> <state> <webhook>

``run`` is what a hook or the watcher does (``Engine.handle`` on an XID 79),
``worker`` what the detached grace worker does, ``resume`` what the next
hook or watcher start does (``resume_pending``, spawning real workers).

    python tests/faults/child.py entry <step> watch|healthcheck|epilog|worker [args]

``entry`` runs a REAL entry point (``python -m slurm_hooks.agent.watch
--once``, ``python -m slurm_hooks hook healthcheck|epilog``, the grace
worker ``python -m slurm_hooks.agent.worker``) from the node's config
(``SLURM_HOOKS_CONFIG``, ``SLURMD_NODENAME``), with ONE step patched at
class level (every engine the process builds) to kill -9 the process, or to
SIGSTOP slurmctld (``stop:<step>``, pid in ``FAULTS_CTLD_PID``) so that the
step and everything after it meets a stalled controller.
The product reads no test switch: the patching happens here.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from slurm_hooks.act import engine as engine_mod
from slurm_hooks.act import evacuate as evacuate_mod
from slurm_hooks.act.engine import Engine, spawn_worker
from slurm_hooks.act.notify import Notifier
from slurm_hooks.act.notify.webhook import WebhookSink
from slurm_hooks.core.model import Action, Component, Finding, Status
from slurm_hooks.decide import PolicyConfig
from slurm_hooks.slurm.cli_backend import CliClient
from slurm_hooks.store.audit import AuditLog
from slurm_hooks.store.state import StateStore

GRACE_S = 2.0
XID79 = Finding(
    "xid", Status.FAIL, "XID79", "GPU has fallen off the bus", Component("gpu", 0),
    Action.RESET_GPU,
)  # fmt: skip


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def before(obj: object, name: str) -> None:
    real = getattr(obj, name)

    def patched(*a, **k):  # type: ignore[no-untyped-def]
        die()
        return real(*a, **k)

    setattr(obj, name, patched)


def after(obj: object, name: str) -> None:
    real = getattr(obj, name)

    def patched(*a, **k):  # type: ignore[no-untyped-def]
        real(*a, **k)
        die()

    setattr(obj, name, patched)


def build(conf: str, state: str, url: str, *, spawn=spawn_worker) -> Engine:  # type: ignore[no-untyped-def]
    client = CliClient(slurm_conf=conf, timeout=10.0, retries=2, backoff=0.2)
    return Engine(
        client,
        PolicyConfig(grace_seconds=GRACE_S, breaker_max_share=1.0, breaker_max_nodes=4),
        StateStore(state),
        AuditLog(Path(state) / "audit.jsonl"),
        Notifier([WebhookSink(url, timeout=3.0, retries=0)]),
        spawn=spawn,
        worker_env={"SLURM_CONF": conf, "SLURM_HOOKS_CONFIG": write_config(state, url)},
    )


def write_config(state: str, url: str) -> str:
    """The config the real grace worker loads: the same policy and webhook."""
    path = Path(state).parent / "faults.toml"
    path.write_text(
        f'[general]\nstate_dir = "{state}"\n\n'
        f"[policy]\ngrace_seconds = {GRACE_S}\nbreaker_max_share = 1.0\n"
        f'breaker_max_nodes = 4\naudit_log = "{Path(state) / "audit.jsonl"}"\n\n'
        f'[notify]\nwebhook_url = "{url}"\nwebhook_retries = 0\nwebhook_timeout = 3.0\n'
    )
    return str(path)


def inject(eng: Engine, step: str) -> None:
    """Arm the kill for ``step`` (see STEPS in the test)."""
    client, sink = eng.slurm, eng.notifier.sinks[0]
    table = {
        "drain:before": lambda: before(client, "drain"),
        "drain:after": lambda: after(client, "drain"),
        "signal:before": lambda: before(evacuate_mod, "signal_jobs"),
        "signal:after": lambda: after(client, "signal_jobs"),
        "alert:before": lambda: before(sink, "send"),
        "spawn:before": lambda: before(eng, "_spawn"),
        "requeue:before": lambda: before(client, "requeue"),
        "requeue:after": lambda: after(client, "requeue"),
        "jobalert:before": lambda: before(sink, "send"),
        "none": lambda: None,
        "noworker": lambda: setattr(eng, "spawn", None),
    }
    table[step]()


def _stop_ctld() -> None:
    os.kill(int(os.environ["FAULTS_CTLD_PID"]), signal.SIGSTOP)


def _at(obj: object, name: str, hook, *, after_call: bool = False) -> None:  # type: ignore[no-untyped-def]
    """Run ``hook`` before (or after) ``obj.name``, once per process."""
    real = getattr(obj, name)
    fired = []

    def patched(*a, **k):  # type: ignore[no-untyped-def]
        if not after_call and not fired:
            fired.append(1)
            hook()
        out = real(*a, **k)
        if after_call and not fired:
            fired.append(1)
            hook()
        return out

    setattr(obj, name, patched)


def inject_entry(step: str) -> None:
    """Arm ``step`` for every engine this process builds (class level)."""
    from slurm_hooks.detect.probes import commands
    from slurm_hooks.slurm.cli_backend import CliClient as Cli

    action = die
    if step.startswith("stop:"):
        action, step = _stop_ctld, step[len("stop:") :]
    table = {
        "decide": (Engine, "_decide", True),
        "drain:before": (Cli, "drain", False),
        "drain:after": (Cli, "drain", True),
        "signal:before": (evacuate_mod, "signal_jobs", False),
        "signal:after": (Cli, "signal_jobs", True),
        "alert:before": (WebhookSink, "send", False),
        "alert:after": (WebhookSink, "send", True),
        "spawn:before": (Engine, "_spawn", False),
        "spawn:after": (commands, "spawn_detached", True),
        "requeue:before": (Cli, "requeue", False),
        "requeue:after": (Cli, "requeue", True),
        "jobalert:before": (WebhookSink, "send", False),
        "jobalert:after": (WebhookSink, "send", True),
        "finish:before": (Engine, "finish_incident", False),
    }
    if step == "noworker":
        Engine._spawn = lambda self, incident: None  # type: ignore[method-assign]
    elif step != "none":
        obj, name, after_call = table[step]
        _at(obj, name, action, after_call=after_call)


def entry(step: str, process: str, rest: list[str]) -> int:
    inject_entry(step)
    if process == "watch":
        from slurm_hooks.agent import watch

        return watch.main(["--once", *rest])
    if process in ("healthcheck", "epilog"):
        from slurm_hooks.agent import hook

        return hook.main([process])
    if process == "worker":
        from slurm_hooks.agent import worker

        return worker.main(rest)
    return 2


def main(argv: list[str]) -> int:
    if argv[0] == "entry":
        return entry(argv[1], argv[2], argv[3:])
    mode, conf, state, url = argv[:4]
    if mode == "run":
        node, step = argv[4:6]
        eng = build(conf, state, url)
        inject(eng, step)
        eng.handle(node, [XID79])
        return 0
    if mode == "worker":
        incident, step = argv[4:6]
        eng = build(conf, state, url, spawn=None)
        inject(eng, step)
        # The grace worker's own loop (agent.worker.run), with our engine.
        from slurm_hooks.agent import worker

        worker.build_engine = lambda _f, _d: eng  # type: ignore[assignment]
        return worker.run(eng.state.incident_path(incident))
    if mode == "resume":
        eng = build(conf, state, url)
        eng.resume_pending()
        engine_mod._reap()
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
