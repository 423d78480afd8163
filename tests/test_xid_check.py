"""XidCheck: gather reads only what is new; judge applies the rules; the
incident history survives between runs."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from slurm_hooks_lab.fake_nvml import FakeNvml

from slurm_hooks.core.errors import ConfigError, KernelLogError
from slurm_hooks.core.model import Action, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext
from slurm_hooks.detect.checks.xid import XidCheck, make_source
from slurm_hooks.detect.xid.settings import XidSettings
from slurm_hooks.detect.xid.source import FileSource, JournalSource, KmsgSource


def ctx(tmp_path: Path, log: Path, now: datetime, **services: object) -> CheckContext:
    return CheckContext(
        node="gpu01",
        phase=Phase.HEALTHCHECK,
        settings={"source": "file", "path": str(log), "proc_gpus": str(tmp_path / "nogpus")},
        state_dir=str(tmp_path / "state"),
        services=services,
        now=lambda: now,
    )


def run(check: XidCheck, c: CheckContext) -> list:
    return check.judge(check.gather(c), c)


def test_phases_and_name() -> None:
    assert XidCheck.name == "xid"
    assert XidCheck.phases == {Phase.HEALTHCHECK, Phase.EPILOG, Phase.PROLOG, Phase.WATCH}


def test_runs_see_only_new_events_and_history_persists(tmp_path: Path, monkeypatch) -> None:
    import slurm_hooks.detect.checks.xid as xid_check

    users = {100: "alice", 200: "bob", 300: "alice"}  # whose processes the driver names
    monkeypatch.setattr(xid_check, "process_owners", lambda pids: {p: users[p] for p in pids})
    log = tmp_path / "node.log"
    log.write_text("")
    check = XidCheck()
    t0 = datetime(2026, 3, 3, 10, 0, tzinfo=UTC)
    (f,) = run(check, ctx(tmp_path, log, t0))
    assert f.status is Status.OK and f.code == "OK"
    # three jobs hit XID 13 on the same GPU, one per healthcheck interval
    for i, pid in enumerate((100, 200, 300)):
        with log.open("a") as fh:
            fh.write(
                f"[{10 + i}.0] NVRM: Xid (PCI:0000:3b:00): 13, pid={pid}, name=train, Graphics Exception: ESR\n"
            )
        findings = run(check, ctx(tmp_path, log, t0.replace(minute=5 * (i + 1))))
        (f,) = findings
        assert f.code == "XID13"
        if i < 2:
            assert (f.status, f.action) == (Status.WARN, Action.RESTART_APP)
        else:
            assert (f.status, f.action) == (Status.FAIL, Action.DRAIN)
            assert f.values["incidents"] == 3
    # nothing new: OK again, the old events are not re-reported
    (f,) = run(check, ctx(tmp_path, log, t0.replace(minute=30)))
    assert f.status is Status.OK


def test_process_owners_reads_who_owns_each_pid_now() -> None:
    import pwd

    from slurm_hooks.detect.checks.xid import process_owners

    me = pwd.getpwuid(os.getuid()).pw_name
    gone = 2**22 + 7  # above pid_max's default: no such process
    assert process_owners({os.getpid(), gone}) == {os.getpid(): me}


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"), reason="needs root, setpriv")
def test_a_users_process_running_a_setuid_program_is_still_the_users() -> None:
    """``/proc/PID``'s owner is the process's *effective* uid: a user's
    process running a setuid-root program shows as root's, and its XIDs
    would count as a second user's, draining the node for one user's own
    code.  The owner is the real uid (here 65534 with effective uid 0, as
    after exec of a setuid-root program)."""
    import pwd
    import subprocess
    import sys

    from slurm_hooks.detect.checks.xid import process_owners

    code = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
    proc = subprocess.Popen(
        ["setpriv", "--ruid=65534", "--euid=0", "--", sys.executable, "-S", "-c", code],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert os.stat(f"/proc/{proc.pid}").st_uid == 0  # what the old rule read
        assert process_owners({proc.pid}) == {proc.pid: pwd.getpwuid(65534).pw_name}
    finally:
        proc.kill()
        proc.wait()


def test_injected_source_and_nvml_names_the_gpu(tmp_path: Path) -> None:
    log = tmp_path / "other.log"
    log.write_text(
        "[5.0] NVRM: Xid (PCI:0000:86:00): 79, pid=1, name=p, GPU has fallen off the bus.\n"
    )
    nv = FakeNvml(
        {
            "gpu_count": 2,
            "gpu": {
                "0": {"pci_bus_id": "00000000:3B:00.0"},
                "1": {"pci_bus_id": "00000000:86:00.0"},
            },
        }
    )
    nv.nvmlInit()
    c = ctx(
        tmp_path,
        tmp_path / "unused.log",
        datetime.now(UTC),
        kernel_log=FileSource(str(log)),
        nvml=nv,
    )
    (f,) = run(XidCheck(), c)
    assert (f.status, f.action, f.code) == (Status.FAIL, Action.REBOOT, "XID79")
    assert f.component.index == 1 and f.component.uuid and f.component.short() == "gpu1"


def test_unreadable_log_raises_for_the_runner(tmp_path: Path) -> None:
    with pytest.raises(KernelLogError):
        XidCheck().gather(ctx(tmp_path, tmp_path / "missing.log", datetime.now(UTC)))


def test_bad_settings_name_the_key(tmp_path: Path) -> None:
    c = CheckContext(
        node="n", phase=Phase.HEALTHCHECK, settings={"repeat_cont": 3}, state_dir=str(tmp_path)
    )
    with pytest.raises(ConfigError, match="checks.xid.repeat_cont"):
        XidCheck().gather(c)
    with pytest.raises(ConfigError, match="source"):
        XidSettings.from_mapping({"source": "file"})
    # the runner's own keys in the same table are not ours to reject
    s = XidSettings.from_mapping(
        {"enabled": True, "timeout_s": 5, "phases": ["epilog"], "repeat_count": 2}
    )
    assert s.repeat_count == 2


def test_make_source(tmp_path: Path) -> None:
    assert isinstance(make_source(XidSettings(path=str(tmp_path / "x"))), FileSource)
    assert isinstance(make_source(XidSettings(source="journal")), JournalSource)
    assert isinstance(make_source(XidSettings(source="kmsg")), KmsgSource)
    auto = make_source(XidSettings(kmsg_path=str(tmp_path / "no-kmsg")))
    assert isinstance(auto, JournalSource)


def test_max_line_reaches_the_scanner(tmp_path: Path) -> None:
    """``[checks.xid] max_line`` is what the scan skips lines by, not 64 KiB."""
    log = tmp_path / "node.log"
    long79 = (
        "[5.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name="
        + "p" * 2000
        + ", GPU has fallen off the bus.\n"
    )
    log.write_text(long79)
    now = datetime.now(UTC)
    c = ctx(tmp_path, log, now)
    (f,) = run(XidCheck(), c)
    assert f.code == "XID79"  # 2 KiB: well under the default
    small = CheckContext(
        node="gpu01",
        phase=Phase.HEALTHCHECK,
        settings={**c.settings, "max_line": 1024},
        state_dir=str(tmp_path / "state-small"),
        now=lambda: now,
    )
    data = XidCheck().gather(small)
    assert data.scan.aggregates == () and data.scan.stats.oversized == 1
    (f,) = XidCheck().judge(data, small)
    assert f.status is Status.OK and f.values["oversized"] == 1
