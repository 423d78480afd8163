"""deploy/systemd and deploy/logrotate point at paths that exist once an admin
follows docs/operations.md, and match what the code writes (issue 17: the
unit's Documentation= and ExecStart= named paths nothing installs)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

from slurm_hooks.cli import COMMANDS
from slurm_hooks.cli.history import audit_path
from slurm_hooks.core import config as config_mod

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "deploy" / "systemd" / "slurm-hooks-watch.service"
OPS = ROOT / "docs" / "operations.md"
LOGROTATE = ROOT / "deploy" / "logrotate" / "slurm-hooks"


def _unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(UNIT.read_text())
    return cp


def _console_scripts() -> dict[str, str]:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(ROOT / "setup.cfg")
    lines = cp["options.entry_points"]["console_scripts"].strip().splitlines()
    return dict(tuple(p.strip() for p in ln.split("=", 1)) for ln in lines)  # type: ignore[misc]


def test_execstart_is_the_virtualenv_the_docs_create() -> None:
    exe, *args = _unit()["Service"]["ExecStart"].split()
    venv, script = exe.rsplit("/bin/", 1)
    ops = OPS.read_text()
    # the docs create a versioned venv and point this path at it
    assert re.search(rf"python3 -m venv {re.escape(venv)}-\$V\b", ops), venv
    assert re.search(rf"ln -sfn {re.escape(venv)}-\$V {re.escape(venv)}\n", ops)
    assert f"--python {venv}/bin/python3" in ops
    assert script in _console_scripts()  # pip install creates bin/<script>
    assert args == ["watch"] and "watch" in COMMANDS


def test_documentation_urls_are_docs_the_admin_installs() -> None:
    docs = _unit()["Unit"]["Documentation"].split()
    ops = OPS.read_text()
    m = re.search(r"install -D -m 0644 -t (\S+)/ \S*docs/\*\.md", ops)
    assert m, "operations.md must say where the docs go"
    for url in docs:
        assert url.startswith(f"file://{m.group(1)}/"), url
        assert (ROOT / "docs" / url.rsplit("/", 1)[1]).is_file(), url


def test_logrotate_rotates_the_default_audit_log_so_history_reads_it() -> None:
    text = LOGROTATE.read_text()
    (path,) = re.findall(r"^(/\S+)\s*\{", text, re.M)
    assert Path(path) == audit_path(config_mod.parse("", validate=False))
    body = text.split("{", 1)[1]
    assert re.search(r"^\s*nocompress\b", body, re.M)  # history skips .gz rotations
    assert "copytruncate" not in body  # writers reopen per record
    assert "deploy/logrotate/slurm-hooks" in OPS.read_text()


def test_operations_covers_the_lifecycle() -> None:
    heads = re.findall(r"^## (.+)$", OPS.read_text(), re.M)
    for want in ("one node", "Upgrade", "Rollback", "Uninstall", "Logs and rotation"):
        assert any(want in h for h in heads), want
    assert "logger -t slurm-hooks" in OPS.read_text()
