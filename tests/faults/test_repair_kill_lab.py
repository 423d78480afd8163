"""kill -9 during each repair step, then roll forward: exactly once (real lab).

Each trial: an idle node gets an XID in its kernel log; the node's real
HealthCheckProgram hook (``python -m slurm_hooks hook healthcheck``) drains
it but starts no worker; the repair worker (``python -m
slurm_hooks.agent.worker``) then runs in a child (repair_child.py) that kills
itself with SIGKILL at one step of the repair (act/repair.py):

* XID 79 (reboot): before / after ``scontrol reboot ASAP nextstate=DOWN``,
  during acceptance after the reboot (the checks ran, the verdict is not
  journalled), before / after ``scontrol update State=RESUME``;
* XID 95 (GPU reset through the fake NVML): before / after the reset;
* XID 1 (catalogue: contact support, so REPLACE at once): before / after the
  hardware ticket's POST.

For the steps after the reboot, an unarmed worker asks for the reboot first
and the lab's RebootProgram (slurm_hooks_lab.reboot) "reboots" the node.
Then the hook runs again, as its next interval would, starting real detached
workers, until the repair settles.  Judged from Slurm (scontrol), the lab's
reboot log, the fake NVML's reset log and the ticket webhook:

* rebooted exactly once (reboot path), never otherwise;
* reset exactly once when the kill came after the reset; a kill between the
  reset's intent and the reset leaves it not done: a reset is never repeated
  on restart (act/repair.py), acceptance decides;
* one hardware ticket (one ticket id; a kill after the receiver answered may
  post the same ticket id a second time, which a receiver keyed on the id
  files once);
* resumed once and back in service (no reason that claims the node), or
  left out with our REPLACE reason; one incident, closed or settled.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from slurm_hooks_lab import reboot as lab_reboot
from slurm_hooks_lab.hooks import WebhookRecorder, install

from faults.conftest import MATRIX
from slurm_hooks.core.errors import LabError
from slurm_hooks.core.ownership import node_ownership
from slurm_hooks.core.reason import try_parse_reason
from slurm_hooks.store.state import REPAIR_SETTLED, StateStore, incident_pending

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CHILD = str(Path(__file__).with_name("repair_child.py"))
REBOOT_FLAGS = {"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"}
#: scenario -> (XID, steps)
SCENARIOS = {
    "reboot": (79, ("reboot:before", "reboot:after", "accept:during", "resume:before",
                    "resume:after")),
    "reset": (95, ("reset:before", "reset:after")),
    "replace": (1, ("ticket:before", "ticket:after")),
}  # fmt: skip
#: Steps the worker reaches only after the node came back from its reboot.
AFTER_REBOOT = {"accept:during", "resume:before", "resume:after"}
TRIALS = [(kind, step) for kind, (_, steps) in SCENARIOS.items() for step in steps]


@pytest.fixture(scope="module")
def rig(lab):  # type: ignore[no-untyped-def]
    """Every node's config with the repair on and the recorder as the ticket
    webhook (no other webhook: its POSTs are tickets only); no
    HealthCheckProgram in slurm.conf: the test runs the hook."""
    lab.reset()
    with WebhookRecorder() as tickets:
        hooks = install(
            lab, gpus=2, grace_s=1.0, reconfigure=False,
            policy={"breaker_max_share": 1.0, "breaker_max_nodes": 10},
            repair={"enabled": True, "ticket_url": tickets.url, "max_concurrent_reboots": 1},
        )  # fmt: skip
        try:
            yield hooks, tickets
        finally:
            hooks.finish(reconfigure=False)


def run(hooks, node: str, step: str, process: str, *args: str) -> int:  # type: ignore[no-untyped-def]
    """A real entry point for ``node`` with ``step`` armed; its exit status."""
    proc = subprocess.run(  # noqa: S603 - fixed argv
        [sys.executable, CHILD, step, process, *args],
        env=hooks.watcher_env(node), capture_output=True, timeout=120, check=False, cwd="/",
    )  # fmt: skip
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != -signal.SIGKILL and ("Traceback" in err or proc.returncode < 0):
        raise AssertionError(f"{process} {step} rc={proc.returncode}: {err[-3000:]}")
    return proc.returncode


def _code(lab, node: str) -> str | None:  # type: ignore[no-untyped-def]
    r = try_parse_reason(lab.client().get_node(node).reason)
    return r.code if r else None


def _back_from_reboot(lab, node: str) -> bool:  # type: ignore[no-untyped-def]
    n = lab.client().get_node(node)
    return lab_reboot.reboots(lab.base_dir, node) >= 1 and not (set(n.flags) & REBOOT_FLAGS)


def _dump(lab, hooks, node: str) -> None:  # type: ignore[no-untyped-def]
    nf = hooks.node(node)
    log = nf.state_dir / "worker.log"
    print("NODE", lab.client().get_node(node))
    print("AUDIT", [(e.get("action"), e.get("outcome"), e.get("why")) for e in hooks.audit(node)])
    print("INCIDENTS", [(i.get("status"), i.get("repair")) for i in hooks.incidents(node)])
    print("WORKER", log.read_text()[-3000:] if log.exists() else None)
    print("REBOOTS", lab_reboot.reboots(lab.base_dir, node))
    for path in (lab_reboot.reboot_dir(lab.base_dir) / f"{node}.out",
                 lab.log_dir / f"slurmd-{node}.log", lab.log_dir / "slurmctld.log"):  # fmt: skip
        print(path.name, path.read_text()[-2500:] if path.exists() else None)


@pytest.mark.parametrize(("kind", "step"), TRIALS, ids=[f"{k}-{s}" for k, s in TRIALS])
def test_kill_at_repair_step_is_rolled_forward_exactly_once(lab, rig, kind, step):  # type: ignore[no-untyped-def]
    hooks, tickets = rig
    lab.reset()
    hooks.reset_state()
    tickets.clear()
    xid = SCENARIOS[kind][0]
    node = lab.node_names[TRIALS.index((kind, step)) % len(lab.node_names)]
    state = StateStore(hooks.node(node).state_dir)
    resets_log = Path(str(hooks.node(node).scenario) + ".resets")
    resets_log.unlink(missing_ok=True)
    if kind == "reset":
        hooks.set_gpu(node, 0, resettable=True)
    started = time.monotonic()
    try:
        hooks.inject_xid(node, xid, gpu=0)
        run(hooks, node, "noworker", "healthcheck")  # detects and drains; no worker
        assert _code(lab, node) == f"XID{xid}", lab.client().get_node(node)
        (doc,) = state.incidents()
        path = str(state.incident_path(doc["incident"]))
        if step in AFTER_REBOOT:
            run(hooks, node, "none", "worker", path)  # plans and asks for the reboot
            lab.wait_for(lambda: _back_from_reboot(lab, node), 60, what=f"{node} rebooted")
        rc = run(hooks, node, step, "worker", path)
        assert rc == -signal.SIGKILL, f"the kill at {step} did not fire (rc={rc})"

        def settled() -> bool:
            docs = state.incidents()
            if not docs or any(incident_pending(d) for d in docs):
                return False
            rep = docs[0].get("repair") or {}
            return rep.get("status") in REPAIR_SETTLED

        runs = 0
        deadline = time.monotonic() + 90
        while not settled() and time.monotonic() < deadline:
            run(hooks, node, "none", "healthcheck")  # its next interval
            runs += 1
            if not settled():
                time.sleep(1.0)
        assert settled(), f"repair not settled after {runs} runs: {state.incidents()}"
    except (AssertionError, LabError):
        _dump(lab, hooks, node)
        raise
    docs = state.incidents()
    assert len(docs) == 1, [d["incident"] for d in docs]
    current = lab.client().get_node(node)
    reboots = lab_reboot.reboots(lab.base_dir, node)
    resets = resets_log.read_text().split() if resets_log.exists() else []
    posts = tickets.alerts("hardware_ticket")
    ticket_ids = Counter(str(p.get("ticket_id")) for p in posts)
    audit = [(e.get("action"), e.get("outcome")) for e in hooks.audit(node)]
    resumes = sum(1 for a, o in audit if a == "resume" and o is None)
    MATRIX.append((
        "kill -9 (repair)", "worker", step,
        f"reboots={reboots}, resets={len(resets)}, tickets={len(ticket_ids)} "
        f"(posts={len(posts)}), resumes={resumes}, final={current.state}"
        f"+{'+'.join(sorted(current.flags))} {_code(lab, node) or '-'}, next runs={runs}, "
        f"{time.monotonic() - started:.0f}s",
    ))  # fmt: skip
    if kind == "replace":
        assert _code(lab, node) == "REPLACE" and (current.drained or current.down), current
        assert len(ticket_ids) == 1, posts
        assert len(posts) <= (2 if step == "ticket:after" else 1), posts
        assert reboots == 0 and resets == []
        return
    # Back in service: no reason that claims it (24.11 keeps a stale one).
    try:
        assert not node_ownership(current).claimed and not current.drained, current
        assert not current.down, current
    except AssertionError:
        _dump(lab, hooks, node)
        raise
    assert not posts
    assert resumes <= 1, audit
    assert docs[0]["status"] == "closed" and docs[0]["repair"]["status"] == "resumed", docs[0]
    if kind == "reboot":
        assert reboots == 1, f"rebooted {reboots} times"
        assert resets == []
    else:
        # The reset is never repeated on restart: done once when the kill came
        # after it, not at all when it came between the intent and the call.
        assert resets == ([] if step == "reset:before" else ["0"]), resets
        assert reboots <= 1
