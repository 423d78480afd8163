"""``slurm-hooks xid scan|explain`` and the scan path's import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from slurm_hooks.cli.xid import command

LOG = (
    "[1.0] NVRM: Xid (PCI:0000:3b:00): 94, pid=11, name=python3, Contained ECC error\n"
    "[2.0] NVRM: Xid (PCI:0000:3b:00): 94, pid=11, name=python3, Contained ECC error\n"
    "[3.0] usb 1-1: new high-speed USB device\n"
)
FATAL = "[4.0] NVRM: Xid (PCI:0000:86:00): 79, pid=<unknown>, name=<unknown>, GPU has fallen off the bus.\n"


def test_scan_stdin_json_and_exit_codes() -> None:
    r = CliRunner().invoke(command, ["scan", "-", "--json"], input=LOG)
    assert r.exit_code == 0, r.output
    (rec,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert (rec["xid"], rec["pci"], rec["pid"], rec["name"], rec["count"]) == (
        94,
        "0000:3b:00.0",
        11,
        "python3",
        2,
    )
    assert rec["message"] == "Contained ECC error" and rec["action"] == "restart_app"
    r = CliRunner().invoke(command, ["scan", "-"], input=LOG + FATAL)
    assert r.exit_code == 1
    assert "XID79" in r.stdout and "FAIL reboot" in r.stdout


def test_scan_file_since_cursor(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(LOG)
    state = str(tmp_path / "state")
    r = CliRunner().invoke(command, ["scan", str(log), "--since-cursor", state, "--json"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
    # Read-only (issue 16): the scan never advances the cursor; the hooks do.
    r = CliRunner().invoke(command, ["scan", str(log), "--since-cursor", state, "--json"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 1
    from slurm_hooks.detect.xid.source import FileSource, scan_new

    scan_new(FileSource(str(log)), state)  # what a hook run does
    r = CliRunner().invoke(command, ["scan", str(log), "--since-cursor", state, "--json"])
    assert r.exit_code == 0 and r.stdout == ""
    with log.open("a") as f:
        f.write(FATAL)
    files = sorted(p.read_bytes() for p in Path(state).rglob("*") if p.is_file())
    for _ in range(2):  # seen each time: nothing consumed
        r = CliRunner().invoke(command, ["scan", str(log), "--since-cursor", state, "--json"])
        assert r.exit_code == 1 and json.loads(r.stdout)["xid"] == 79
    assert sorted(p.read_bytes() for p in Path(state).rglob("*") if p.is_file()) == files


def test_scan_errors_exit_2(tmp_path: Path) -> None:
    r = CliRunner().invoke(command, ["scan", str(tmp_path / "missing.log")])
    assert r.exit_code == 2 and "error" in r.output
    r = CliRunner().invoke(command, ["scan", "-", "--since-cursor", str(tmp_path)], input="")
    assert r.exit_code == 2


def test_scan_reports_skipped_lines() -> None:
    r = CliRunner().invoke(
        command,
        ["scan", "-"],
        input="NVRM: Xid (PCI:0000:3b:00): 7\n"
        + "x" * 70_000
        + " NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
    )
    assert r.exit_code == 0
    assert "skipped 1 malformed and 1 oversized" in r.stderr


def test_explain() -> None:
    r = CliRunner().invoke(command, ["explain", "79"])
    assert r.exit_code == 0
    assert (
        "GPU has fallen off the bus" in r.stdout
        and "RESTART_BM" in r.stdout
        and "reboot" in r.stdout
    )
    r = CliRunner().invoke(command, ["explain", "13"])
    assert "repeated on the same GPU" in r.stdout
    r = CliRunner().invoke(command, ["explain", "9999"])
    assert r.exit_code == 0 and "not in the catalogue" in r.stdout
    r = CliRunner().invoke(command, ["explain", "--sxid", "12028"])
    assert r.exit_code == 0 and "PRIV" in r.stdout
    r = CliRunner().invoke(command, ["--help"])
    assert "Examples" in r.stdout


def test_scan_path_imports_no_click_or_requests() -> None:
    code = (
        "import sys\n"
        "import slurm_hooks.detect.xid.source, slurm_hooks.detect.xid.rules, slurm_hooks.detect.xid.history, slurm_hooks.detect.checks.xid\n"
        "from slurm_hooks.detect.xid.scan import scan_text\n"
        "from slurm_hooks.detect.xid.rules import evaluate\n"
        "evaluate(scan_text('NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.').aggregates, now=0.0)\n"
        "bad = sorted(m for m in ('click', 'requests', 'pynvml') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def _explain(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "slurm_hooks", "xid", "explain", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def _field(text: str, label: str) -> str:
    """The (re-joined) text of one ``label:`` field of ``xid explain``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {label}:"))
    out = [lines[start].split(":", 1)[1]]
    for ln in lines[start + 1 :]:
        if not ln.startswith(" " * 23):
            break
        out.append(ln)
    return " ".join(" ".join(out).split())


def test_explain_says_we_only_evacuate_and_what_a_human_does() -> None:
    out79 = _explain("79")
    does = _field(out79, "slurm-hooks does")
    assert "drains the node" in does and "SIGUSR1" in does and "requeues" in does
    assert "never reboots" in does and "action reboot" not in out79
    assert "reboot the node" in _field(out79, "a human must")
    out48 = _explain("48")
    assert "action reset_gpu" not in out48
    assert "drains the node" in _field(out48, "slurm-hooks does")
    assert "reset the GPU" in _field(out48, "a human must")
    out13 = _explain("13")
    assert _field(out13, "slurm-hooks does").startswith("WARN: nothing to the node")
    assert "restarts the application" in _field(out13, "a human must")
    replace = _explain("1")  # CONTACT_SUPPORT bucket
    assert "replacement" in _field(replace, "slurm-hooks does")
    assert "vendor" in _field(replace, "a human must")


def test_explain_fits_80_columns_unless_wide() -> None:
    for xid in ("79", "48", "13", "74", "154"):
        assert max(len(ln) for ln in _explain(xid).splitlines()) <= 80, xid
    assert max(len(ln) for ln in _explain("79", "--wide").splitlines()) > 80
