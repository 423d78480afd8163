"""install: shims, slurm.conf lines, comparison with a running Slurm."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.cli import installer as inst
from slurm_hooks.cli.install import command as install_cmd
from slurm_hooks.detect.probes.commands import DEFAULT_PATH
from slurm_hooks.slurm.parse import parse_show_config

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "install"


@pytest.mark.parametrize("phase", list(inst.Phase))
def test_repo_shims_are_the_rendered_defaults(phase):
    path = inst.shim_path(REPO, phase)
    assert path.read_text() == inst.render_shim(phase)
    assert os.access(path, os.X_OK)


def test_shim_sets_defaults_only_and_execs_the_python(tmp_path):
    """Run the shim with sh: no PATH and no SLURM_CONF (like slurmd's
    HealthCheckProgram) get defaults; a set SLURM_CONF is kept."""
    fake = tmp_path / "py"
    fake.write_text(
        '#!/bin/sh\necho "PATH=$PATH SLURM_CONF=$SLURM_CONF CFG=$SLURM_HOOKS_CONFIG ARGS=$*"\n'
    )
    fake.chmod(0o755)
    shim = tmp_path / "shim"
    shim.write_text(
        inst.render_shim(
            "healthcheck", python=str(fake), slurm_conf="/x/slurm.conf", config="/c.toml"
        )
    )
    out = subprocess.run(["/bin/sh", str(shim)], env={}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        f"PATH={DEFAULT_PATH} SLURM_CONF=/x/slurm.conf CFG=/c.toml ARGS=-m slurm_hooks hook healthcheck"
    )
    env = {"PATH": "/bin", "SLURM_CONF": "/mine.conf"}
    out = subprocess.run(
        ["/bin/sh", str(shim)], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("PATH=/bin SLURM_CONF=/mine.conf ")


@pytest.mark.parametrize(
    ("phase", "hook_rc", "shim_rc"),
    [
        ("prolog", 0, 0),
        ("prolog", 3, 1),  # we drained the node: Slurm must not start the job here
        ("prolog", 1, 0),  # slurm-hooks crashed or is not installed: fail open
        ("prolog", 127, 0),
        ("epilog", 3, 0),  # a failing epilog would drain with Slurm's own reason
        ("epilog", 1, 0),
    ],
)
def test_prolog_and_epilog_shims_fail_open_on_our_own_failure(tmp_path, phase, hook_rc, shim_rc):
    """Only the hook's deliberate reject may fail a prolog: a broken install
    must never drain every node of the cluster with "Prolog error"."""
    fake = tmp_path / "py"
    fake.write_text(f"#!/bin/sh\nexit {hook_rc}\n")
    fake.chmod(0o755)
    shim = tmp_path / "shim"
    shim.write_text(inst.render_shim(phase, python=str(fake)))
    res = subprocess.run(["/bin/sh", str(shim)], env={}, capture_output=True, check=False)
    assert res.returncode == shim_rc


def test_a_slurm_hooks_a_user_left_in_the_hooks_directory_never_runs(tmp_path):
    """``python -m`` imports from the working directory first: a
    ``slurm_hooks`` package a user leaves in /tmp (where slurmstepd starts a
    task whose directory the node lacks) must not run as root.  The shim runs
    the real Python from a directory the user wrote into."""
    planted = tmp_path / "users"
    (planted / "slurm_hooks").mkdir(parents=True)
    marker = tmp_path / "ran-as-root"
    (planted / "slurm_hooks" / "__init__.py").write_text("")
    (planted / "slurm_hooks" / "__main__.py").write_text(f"open({str(marker)!r}, 'w')\n")
    shim = tmp_path / "shim"
    shim.write_text(inst.render_shim("prolog", python=sys.executable))
    res = subprocess.run(["/bin/sh", str(shim), "--no-such-option"], env={}, cwd=planted,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert not marker.exists(), res.stderr
    assert "usage: python3 -m slurm_hooks hook" in res.stderr  # the real one answered


def test_the_acceptance_job_starts_in_roots_directory():
    from slurm_hooks.agent.acceptance import AcceptanceConfig, srun_argv

    argv = srun_argv(AcceptanceConfig(), "n1", "slurm-hooks-accept-n1")
    assert "--chdir=/" in argv and argv.index("--chdir=/") < argv.index("-m")


def test_shim_refuses_paths_that_break_quoting():
    with pytest.raises(ValueError):
        inst.render_shim("prolog", slurm_conf='/etc/"x')


def test_compare_with_recorded_scontrol_show_config():
    running = parse_show_config((DATA / "scontrol_show_config_22.05.txt").read_text())
    settings = inst.recommended_settings("/etc/slurm", hook_budget_s=90, margin_s=30)
    verdicts = {d.setting.key: d.verdict for d in inst.compare(settings, running)}
    assert verdicts == {
        "Prolog": inst.Verdict.OK,
        "Epilog": inst.Verdict.MISSING,  # (null)
        "PrologFlags": inst.Verdict.DIFFERS,  # Alloc without DeferBatch
        "PrologEpilogTimeout": inst.Verdict.OK,  # 65534: no limit
        "HealthCheckProgram": inst.Verdict.DIFFERS,  # /bin/true
        "HealthCheckInterval": inst.Verdict.OK,  # "300 sec"
        "HealthCheckNodeState": inst.Verdict.OK,
        "TaskProlog": inst.Verdict.MISSING,  # (null): a hint, not required
        "SchedulerParameters": inst.Verdict.OK,
        "AuthInfo": inst.Verdict.OK,  # cred_expire=10 <= 30
    }


S = inst.Setting
M = inst.Match


@pytest.mark.parametrize(
    ("setting", "running", "verdict", "suggested"),
    [
        (
            S("PrologFlags", "Alloc", M.CONTAINS),
            "Contain,X11",
            "differs",
            "PrologFlags=Contain,X11,Alloc",
        ),
        (S("PrologFlags", "Alloc", M.CONTAINS), "alloc,Contain", "ok", None),
        (
            S("PrologFlags", "Alloc,DeferBatch", M.CONTAINS),
            "Alloc,Contain",
            "differs",
            "PrologFlags=Alloc,Contain,DeferBatch",
        ),
        (S("PrologFlags", "Alloc", M.CONTAINS), "(null)", "missing", "PrologFlags=Alloc"),
        (S("PrologEpilogTimeout", "120", M.AT_LEAST), "60", "differs", "PrologEpilogTimeout=120"),
        (S("PrologEpilogTimeout", "120", M.AT_LEAST), "120", "ok", None),
        (
            S("AuthInfo", "cred_expire=30", M.ITEM_AT_MOST),
            "socket=/s",
            "missing",
            "AuthInfo=socket=/s,cred_expire=30",
        ),
        (
            S("AuthInfo", "cred_expire=30", M.ITEM_AT_MOST),
            "cred_expire=120,socket=/s",
            "differs",
            "AuthInfo=socket=/s,cred_expire=30",
        ),
        (S("Prolog", "/etc/slurm/prolog.d/*"), "/etc/slurm//prolog.d/*", "ok", None),
        (
            S("Prolog", "/etc/slurm/prolog.d/*"),
            "/usr/local/prolog.sh",
            "differs",
            "Prolog=/etc/slurm/prolog.d/*",
        ),
        (S("HealthCheckNodeState", "ANY"), "ANY,CYCLE", "ok", None),
        (S("HealthCheckNodeState", "ANY"), "IDLE", "differs", "HealthCheckNodeState=ANY"),
        (S("HealthCheckInterval", "300"), "0 sec", "differs", "HealthCheckInterval=300"),
    ],
)
def test_judge(setting, running, verdict, suggested):
    (d,) = inst.compare([setting], {setting.key: running})
    assert d.verdict == verdict
    if suggested:
        assert d.suggested == suggested


def test_timeout_is_budget_plus_margin():
    s = {x.key: x for x in inst.recommended_settings("/p", hook_budget_s=100.5, margin_s=30)}
    assert s["PrologEpilogTimeout"].value == "131"
    assert s["Prolog"].value == "/p/prolog.d/*"
    assert s["HealthCheckProgram"].value == "/p/healthcheck/slurm-hooks-healthcheck"


def fake_venv_python(tmp_path):
    """An interpreter at another path that imports slurm_hooks (install
    refuses one that does not: issue 17)."""
    py = tmp_path / "opt" / "sh" / "bin" / "python3"
    py.parent.mkdir(parents=True)
    py.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    py.chmod(0o755)
    return py


def test_install_writes_shims_and_config_and_is_idempotent(tmp_path):
    cfg = tmp_path / "etc" / "config.toml"
    py = fake_venv_python(tmp_path)
    args = [
        "--prefix",
        str(tmp_path / "slurm"),
        "--config",
        str(cfg),
        "--python",
        str(py),
        "--slurm-conf",
        "/etc/slurm/slurm.conf",
        "--no-check",
        "--budget",
        "60",
    ]
    r = CliRunner().invoke(install_cmd, args)
    assert r.exit_code == 0, r.output
    assert r.output.count(": created") == 5  # 3 shims, the TaskProlog, the config
    shim = tmp_path / "slurm" / "prolog.d" / "50-slurm-hooks"
    assert f"\n{py} -m slurm_hooks hook prolog" in shim.read_text()
    assert f'SLURM_HOOKS_CONFIG="${{SLURM_HOOKS_CONFIG:-{cfg}}}"' in shim.read_text()
    assert f"Prolog={tmp_path}/slurm/prolog.d/*" in r.output
    assert "PrologEpilogTimeout=90" in r.output
    # The commented defaults are a valid (empty) config.
    from slurm_hooks.core import config

    assert config.load(cfg).data == {}
    cfg.write_text("[general]\nlog_level = 'DEBUG'\n")
    r = CliRunner().invoke(install_cmd, args)
    assert r.exit_code == 0
    assert r.output.count(": unchanged") == 4 and f"{cfg}: kept" in r.output
    assert "DEBUG" in cfg.read_text()


def test_dry_run_writes_nothing(tmp_path):
    r = CliRunner().invoke(
        install_cmd,
        [
            "--prefix",
            str(tmp_path / "p"),
            "--config",
            str(tmp_path / "c.toml"),
            "--no-check",
            "--dry-run",
        ],
    )
    assert r.exit_code == 0 and "would be created" in r.output
    assert not (tmp_path / "p").exists() and not (tmp_path / "c.toml").exists()


def test_check_without_slurm_exits_2(tmp_path):
    env = {"PATH": str(tmp_path)}  # no scontrol here
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    r = CliRunner(env=env).invoke(
        install_cmd,
        ["--prefix", str(tmp_path / "p"), "--config", str(tmp_path / "c.toml"),
         "--slurm-conf", str(conf)],
    )  # fmt: skip
    assert r.exit_code == 2
    assert "cannot compare with the running Slurm" in r.output


@pytest.mark.slurm
def test_installed_glob_prolog_runs_on_the_lab(fresh_lab, job_dir, tmp_path):
    """The shims installed by ``slurm-hooks install``, wired in with the
    printed lines (glob Prolog=<dir>/prolog.d/*), are run by slurmd."""
    from conftest import submit

    lab = fresh_lab
    markers = tmp_path / "markers"
    markers.mkdir()
    fake_python = tmp_path / "python3"
    # Install's preflight (``-c "import slurm_hooks"``, shims run with
    # ``--dry-run``) gets the real interpreter, so it passes as it would for a
    # real venv; every other call (slurmd running a shim) is recorded.
    fake_python.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --dry-run "*|" -c "*) exec ' + sys.executable + ' "$@" ;; esac\n'
        f'echo "$SLURM_SCRIPT_CONTEXT job=$SLURM_JOB_ID conf=$SLURM_CONF path=$PATH args=$*" '
        f'>> {markers}/"$SLURMD_NODENAME"\n'
    )
    fake_python.chmod(0o755)
    prefix = tmp_path / "slurm"
    base = [
        # The command object itself, so this runs before and after it is registered.
        sys.executable,
        "-c",
        "from slurm_hooks.cli.install import command; command()",
        "--prefix",
        str(prefix),
        "--config",
        str(tmp_path / "config.toml"),
        "--python",
        str(fake_python),
        "--slurm-conf",
        str(lab.slurm_conf),
        "--budget",
        "30",
    ]
    env = {**os.environ, **lab.env(), "NO_COLOR": "1"}
    first = subprocess.run(base, env=env, check=False, capture_output=True, text=True, timeout=60)
    assert first.returncode == 1, first.stdout + first.stderr  # slurm.conf lacks our lines
    assert "missing  Prolog" in first.stdout
    # The lab's GPUs are not GRES, and the written config keeps gres_gpus = true.
    assert "GresTypes = (null): GPUs are not GRES here" in first.stdout
    snippet = first.stdout.split("slurm.conf lines for slurm-hooks:\n", 1)[1].split("\n\n", 1)[0]
    required = [
        line
        for line in snippet.splitlines()
        if line
        and not line.startswith("#")
        and not line.startswith(("AuthInfo", "SchedulerParameters"))
    ]
    assert f"Prolog={prefix}/prolog.d/*" in required
    try:
        lab.reconfigure("\n".join(required) + "\n")
        second = subprocess.run(
            base, env=env, check=False, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 0, second.stdout + second.stderr
        script = job_dir / "job.sh"
        script.write_text("#!/bin/sh\nsrun -N2 true\n")
        job = submit(lab, script, "-N2")
        lab.wait_job(job, lambda j: j.state in ("COMPLETED", "FAILED", "CANCELLED"), timeout=60)
        lab.wait_for(
            lambda: len([p for p in markers.iterdir() if "epilog" in p.read_text()]) >= 2,
            20,
            what="epilog markers",
        )
        # slurmd also runs the health check on every node at its interval
        # (a slow run sees it): the job's lines are the prolog's and epilog's.
        lines = {p.name: [e for e in p.read_text().splitlines()
                          if not e.endswith("args=-m slurm_hooks hook healthcheck")]
                 for p in markers.iterdir()}  # fmt: skip
        lines = {name: entries for name, entries in lines.items() if entries}
        assert len(lines) == 2, lines
        for entries in lines.values():
            assert f"prolog_slurmd job={job} conf={lab.slurm_conf}" in entries[0]
            assert entries[0].endswith("args=-m slurm_hooks hook prolog")
            assert any(e.endswith("args=-m slurm_hooks hook epilog") for e in entries)
        # The health-check shim, run the way slurmd runs it (no PATH, no SLURM_CONF).
        node = lab.node_names[0]
        lab.run_on_node(node, [str(prefix / "healthcheck" / "slurm-hooks-healthcheck")], check=True)
        last = (markers / node).read_text().splitlines()[-1]
        assert (
            f"conf={lab.slurm_conf} path={DEFAULT_PATH} args=-m slurm_hooks hook healthcheck"
            in last
        )
    finally:
        lab.reset()


def test_prolog_epilog_timeout_follows_the_prolog_budget(tmp_path, monkeypatch):
    """PrologEpilogTimeout bounds the prolog: it follows [prolog] budget_s
    (and the epilog's budget), plus the margin."""
    from slurm_hooks.agent.prolog import PrologConfig

    monkeypatch.delenv("SLURM_HOOKS_CONFIG", raising=False)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[prolog]\nbudget_s = 120\n")
    assert inst.hook_budget_s(cfg) == 120
    s = {x.key: x for x in inst.recommended_settings("/p", hook_budget_s=inst.hook_budget_s(cfg))}
    assert s["PrologEpilogTimeout"].value == str(120 + inst.TIMEOUT_MARGIN_S)
    cfg.write_text("[checks]\nbudget_s = { epilog = 200 }\n")
    assert inst.hook_budget_s(cfg) == 200
    # Defaults: the default prolog budget, never below it.
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(tmp_path / "missing.toml"))
    assert inst.hook_budget_s() >= PrologConfig().budget_s
    monkeypatch.setenv("SLURM_HOOKS_CONFIG", str(cfg))
    assert inst.hook_budget_s() == 200


# -- the TaskProlog (issue 30: the flight recorder on for every job) ---------------------------


def test_repo_task_prolog_is_the_rendered_default():
    from slurm_hooks.cli.task_prolog import render_task_prolog, task_prolog_path

    path = task_prolog_path(REPO)
    assert path.read_text() == render_task_prolog()
    assert os.access(path, os.X_OK)


def _task_prolog(tmp_path, env):
    from slurm_hooks.cli.task_prolog import render_task_prolog

    script = tmp_path / "tp"
    script.write_text(render_task_prolog(str(tmp_path / "progress")))
    (tmp_path / "progress").mkdir(exist_ok=True)
    out = subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return out.stdout.splitlines()


def test_task_prolog_exports_the_flight_recorder_into_the_jobs_directory(tmp_path):
    lines = _task_prolog(tmp_path, {"SLURM_JOB_ID": "812"})
    where = f"{tmp_path}/progress/812/nccl_trace_rank_"
    assert lines == [
        "export TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
        "export TORCH_FR_BUFFER_SIZE=2000",
        "export TORCH_NCCL_DUMP_ON_TIMEOUT=1",
        f"export TORCH_NCCL_DEBUG_INFO_TEMP_FILE={where}",
        f"export TORCH_FR_DUMP_TEMP_FILE={where}",
    ]
    assert (tmp_path / "progress" / "812").is_dir()
    # The watcher's default glob finds what PyTorch writes there (rank appended).
    from slurm_hooks.detect.progress.settings import ProgressConfig

    default = ProgressConfig()
    assert default.flight_recorder_path == default.dir + "/{job}/" + "nccl_trace_rank_*"


def test_task_prolog_keeps_the_jobs_own_settings_and_its_opt_out(tmp_path):
    mine = {"SLURM_JOB_ID": "813", "TORCH_FR_BUFFER_SIZE": "50",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/scratch/me/fr_"}  # fmt: skip
    assert _task_prolog(tmp_path, mine) == ["export TORCH_NCCL_DUMP_ON_TIMEOUT=1"]
    for off in ("0", "off"):
        assert _task_prolog(tmp_path, {"SLURM_JOB_ID": "814", "SLURM_HOOKS_WATCH": off}) == []
    assert _task_prolog(tmp_path, {"SLURM_JOB_ID": "8;15"}) == []
    assert _task_prolog(tmp_path, {}) == []


def test_task_prolog_never_uses_a_directory_it_does_not_own(tmp_path):
    (tmp_path / "progress").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "progress" / "816").symlink_to(tmp_path / "elsewhere")
    assert _task_prolog(tmp_path, {"SLURM_JOB_ID": "816"}) == []
    if os.getuid() == 0:  # a directory of another user (made for a future job id)
        other = tmp_path / "progress" / "817"
        other.mkdir()
        os.chown(other, 65534, 65534)
        assert _task_prolog(tmp_path, {"SLURM_JOB_ID": "817"}) == []


def test_task_prolog_refuses_a_directory_a_shell_would_split():
    from slurm_hooks.cli.task_prolog import render_task_prolog

    for bad in ("relative", "/a b", "/a$b", "/a'b"):
        with pytest.raises(ValueError):
            render_task_prolog(bad)
