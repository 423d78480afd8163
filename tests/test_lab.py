"""The lab itself: state file, ports, per-node namespaces, reconfigure, and a
second lab side by side with the session one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from slurm_hooks_lab.lab import Lab, _port_free, pick_ports

from slurm_hooks.core.errors import LabError
from slurm_hooks.detect.probes.commands import run

pytestmark = pytest.mark.slurm


def test_pick_ports_are_free_and_distinct() -> None:
    ports = pick_ports(20)
    assert len(set(ports)) == 20 and all(_port_free(p) for p in ports)
    lo, _ = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert all(p < lo for p in ports)


def test_status_and_state_file(lab) -> None:  # type: ignore[no-untyped-def]
    st = lab.status()
    assert st.running and st.slurm_version and st.startup_seconds is not None
    assert set(st.processes) >= {"munged", "slurmctld", *(f"slurmd-{n}" for n in lab.node_names)}
    assert all(alive for _, alive in st.processes.values())
    assert [n.name for n in st.nodes] == ["n1", "n2", "n3", "n4"]
    ports = [st.ctld_port, *st.node_ports.values()]
    assert len(set(ports)) == 5
    state = json.loads(lab.state_file.read_text())
    assert state["pids"]["slurmctld"] == st.processes["slurmctld"][0]
    # another process's view of the same directory finds the same lab
    other = Lab(lab.base_dir)
    assert other.node_names == lab.node_names and other.is_running()
    assert lab.env() == {"SLURM_CONF": str(lab.slurm_conf)}
    for name in lab.node_names:
        assert lab.node_dir(name).is_dir()
    with pytest.raises(LabError):
        lab.node_dir("n99")


def test_up_twice_refused(lab) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LabError, match="already running"):
        Lab(lab.base_dir, 4).up()


def test_node_hostname_and_hook_environment(lab) -> None:  # type: ignore[no-untyped-def]
    for name in ("n1", "n3"):
        assert lab.run_on_node(name, ["/bin/hostname"]).stdout.strip() == name
        # like HealthCheckProgram: only SLURMD_NODENAME, no PATH, no SLURM_CONF
        env = lab.run_on_node(name, ["/usr/bin/env"]).stdout.splitlines()
        assert env == [f"SLURMD_NODENAME={name}"]


def test_jobs_see_node_hostname(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    script = job_dir / "h.sh"
    script.write_text(
        '#!/bin/bash\necho "$(hostname) $SLURMD_NODENAME" > "$OUT/host.$SLURM_JOB_ID"\n'
    )
    script.chmod(0o755)
    jid = sbatch(script, "-w", "n3", f"--export=ALL,OUT={job_dir}", "-o", "/dev/null")
    out = job_dir / f"host.{jid}"
    fresh_lab.wait_for(out.exists, 20, what="job output")
    assert out.read_text().split() == ["n3", "n3"]


def test_reconfigure_reaches_slurmd(fresh_lab, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    prolog = fresh_lab.hooks_dir / "prolog-test.sh"
    prolog.write_text(
        f'#!/bin/sh\necho "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_JOB_USER" >> {job_dir}/prolog.log\n'
    )
    prolog.chmod(0o755)
    fresh_lab.reconfigure(f"Prolog={prolog}\nSchedulerParameters=max_rpc_cnt=100\n")
    conf = fresh_lab.client().show_config()
    assert conf["Prolog"] == str(prolog)
    assert "nohold_on_prolog_fail" in conf["SchedulerParameters"]
    assert "max_rpc_cnt=100" in conf["SchedulerParameters"]
    script = job_dir / "j.sh"
    script.write_text("#!/bin/bash\ntrue\n")
    script.chmod(0o755)
    jid = sbatch(script, "-w", "n2", "-o", "/dev/null")
    log = job_dir / "prolog.log"
    fresh_lab.wait_for(log.exists, 20, what="prolog to run")
    assert log.read_text().split() == ["n2", jid, "sltest"]
    fresh_lab.reset()  # back to the default configuration
    conf = fresh_lab.client().show_config()
    if fresh_lab.client().version() < (24, 11, 0):
        assert conf["Prolog"] == "(null)"  # 22.05 prints unset keys
    else:
        assert "Prolog" not in conf  # 24.11 and 26.05 leave them out


def test_second_lab_side_by_side(lab) -> None:  # type: ignore[no-untyped-def]
    base = tempfile.mkdtemp(prefix="slurm-hooks-test-lab2-")
    second = Lab(base, 1)
    try:
        seconds = second.up()
        assert seconds > 0
        st1, st2 = lab.status(), second.status()
        assert st2.running and [n.name for n in st2.nodes] == ["n1"]
        ports1 = {st1.ctld_port, *st1.node_ports.values()}
        ports2 = {st2.ctld_port, *st2.node_ports.values()}
        assert not ports1 & ports2
        pids = [pid for pid, _ in st2.processes.values()]
        # the `lab down` of another process: a fresh object reading the state file
        assert Lab(base).down() is True
        assert not any(os.path.exists(f"/proc/{p}") and _alive(p) for p in pids)
        assert Lab(base).down() is False  # idempotent
        assert not second.status().running
        # the session lab is untouched
        assert all(alive for _, alive in lab.status().processes.values())
        assert run(["scontrol", "ping"], timeout=10, env=lab.env()).ok
    finally:
        second.down()
        shutil.rmtree(base, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_down_of_empty_dir_is_noop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert Lab(tmp_path).down() is False
    assert not Lab(tmp_path).status().running


def test_lab_under_a_closed_parent_is_refused_with_the_fix() -> None:
    """A lab dir under a 0700 directory (tempfile.mkdtemp) is unreachable for
    munged (user munge): up() refuses before starting anything, naming the
    directory and the fix; directories it creates itself are opened."""
    from slurm_hooks_lab.lab import can_traverse, closed_parent, missing_prerequisites

    problems = missing_prerequisites()
    if problems:
        pytest.skip("; ".join(problems))
    import pwd

    munge = pwd.getpwnam("munge")
    parent = tempfile.mkdtemp(prefix="slurm-hooks-closed-")  # 0700, owned by root
    try:
        base = os.path.join(parent, "lab")
        assert closed_parent(base, "munge") == Path(parent)
        with pytest.raises(LabError, match=rf"{parent}.*chmod o\+x {parent}"):
            Lab(base, 1).up()
        assert not os.path.exists(os.path.join(base, "lab.json"))
        # Owned by munge, 0700 is fine; group munge needs g+x; root's 0701 too.
        os.chown(parent, munge.pw_uid, munge.pw_gid)
        assert can_traverse(parent, munge.pw_uid, [munge.pw_gid])
        os.chown(parent, 0, munge.pw_gid)
        assert not can_traverse(parent, munge.pw_uid, [munge.pw_gid])
        os.chmod(parent, 0o710)
        assert can_traverse(parent, munge.pw_uid, [munge.pw_gid])
        os.chown(parent, 0, 0)
        os.chmod(parent, 0o701)
        assert closed_parent(base, "munge") is None
    finally:
        shutil.rmtree(parent, ignore_errors=True)
