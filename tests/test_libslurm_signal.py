"""The libslurm signaller (``slurm_hooks.slurm.libslurm_signal``): what it
accepts, that it answers in the words ``CliClient`` reads from scancel,
and when ``CliClient`` uses it (``signal_via = "auto"`` below Slurm 24.05,
with the library here).  That it signals as scancel does, without the
job-table read, is shown on the real lab (tests/test_fault_cost_lab.py,
tests/test_signal_contract_lab.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from slurm_hooks.core.errors import JobGone, SlurmError
from slurm_hooks.detect.probes.commands import CommandResult
from slurm_hooks.slurm import libslurm_signal as ls
from slurm_hooks.slurm import scancel
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.cli_backend import CliClient


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--signal=USR1", "--batch", "--", "7"], (10, ls.KILL_JOB_BATCH, "batch ", ["7"])),
        (["-v", "--signal=SIGTERM", "--", "7", "8_2"], (15, 0, "", ["7", "8_2"])),
        (["--signal=15", "--full", "9+1"], (15, ls.KILL_FULL_JOB, "full ", ["9+1"])),
    ],
)
def test_parse_args(argv: list[str], want: tuple[int, int, str, list[str]]) -> None:
    assert ls.parse_args(argv) == want


@pytest.mark.parametrize(
    "argv",
    [
        ["--", "7"],  # no signal
        ["--signal=USR1"],  # no job
        ["--signal=NOPE", "--", "7"],
        ["--signal=99", "--", "7"],
        ["--signal=USR1", "--", "7;rm"],
        ["--signal=USR1", "--", "-1"],
        ["--signal=USR1", "--hurry", "7"],
    ],
)
def test_bad_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(ls.UsageError):
        ls.parse_args(argv)
    assert ls.main(argv) == 2


def test_without_a_library_it_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ls, "LIBRARIES", ())
    assert ls.main(["--signal=USR1", "--", "7"]) == 2
    assert "no libslurm found" in capsys.readouterr().err


def test_find_library_prefers_the_commands_own_build(tmp_path: Path) -> None:
    (tmp_path / "slurm-wlm").mkdir()
    full = tmp_path / "slurm-wlm" / "libslurmfull.so"
    public = tmp_path / "libslurm.so.37"
    public.write_bytes(b"")
    patterns = (str(tmp_path / "*" / "libslurmfull.so"), str(tmp_path / "libslurm.so.[0-9]*"))
    assert ls.find_library(patterns) == str(public)
    full.write_bytes(b"")
    assert ls.find_library(patterns) == str(full)
    assert ls.find_library((str(tmp_path / "none*"),)) is None


def test_its_words_are_read_by_the_scancel_parser() -> None:
    """The notes and refusals it writes (scancel 22.05's, with its own name)
    are what CliClient reads: asked, then refused with a typed error."""
    err = (
        f"{ls.PROG}: Signal 10 to batch job 7\n"
        f"{ls.PROG}: Signal 10 to batch job 8\n"
        f"{ls.PROG}: error: Kill job error on job id 8: Invalid job id specified\n"
    )
    assert scancel.asked_job_ids(err) == {"7", "8"}
    assert set(scancel.failed_job_ids(err)) == {"8"}
    out = scancel.outcomes(["python", "-m"], ["7", "8"], scancel.failed_job_ids(err), 1)
    assert out["7"] is None and isinstance(out["8"], JobGone)


class Fake:
    """sinfo --version says ``version``; the signaller answers like the
    lab's: the ended job refused."""

    def __init__(self, version: str, gone: str = "") -> None:
        self.version, self.gone = version, gone
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **_kw: object) -> CommandResult:
        self.calls.append(list(argv))
        if argv[:2] == ["sinfo", "--version"]:
            return CommandResult(tuple(argv), 0, f"slurm {self.version}\n", "", 0.01)
        lines = [f"{ls.PROG}: Signal 10 to batch job {j}" for j in argv if j.isdigit()]
        if self.gone in argv:
            lines.append(f"{ls.PROG}: error: Kill job error on job id {self.gone}: "
                         "Job/step already completing or completed")  # fmt: skip
        return CommandResult(tuple(argv), 1 if self.gone in argv else 0, "", "\n".join(lines), 0.0)


def test_auto_below_24_05_signals_through_libslurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ls, "find_library", lambda: "/usr/lib/libslurm.so.37")
    fake = Fake("22.05.8", gone="8")
    out = CliClient(runner=fake, signal_via="auto").signal_jobs(
        ["7", "8"], "USR1", SignalTarget.BATCH
    )
    signal_call = fake.calls[-1]
    assert signal_call == [sys.executable, "-m", ls.MODULE, "-v", "--signal=USR1", "--batch", "--", "7", "8"]  # fmt: skip
    assert out["7"] is None and isinstance(out["8"], JobGone)


@pytest.mark.parametrize(
    ("version", "via", "library"),
    [
        ("24.11.5", "auto", "/usr/lib/libslurm.so.42"),  # one request already
        ("22.05.8", "scancel", "/usr/lib/libslurm.so.37"),  # asked for scancel
        ("22.05.8", "auto", None),  # no library here
    ],
)
def test_otherwise_scancel(
    monkeypatch: pytest.MonkeyPatch, version: str, via: str, library: str | None
) -> None:
    monkeypatch.setattr(ls, "find_library", lambda: library)
    fake = Fake(version)
    CliClient(runner=fake, signal_via=via).signal_jobs(["7"], "TERM", SignalTarget.STEPS)
    assert fake.calls[-1] == ["scancel", "--ctld", "-v", "--signal=TERM", "7"]


def test_an_unknown_way_is_refused() -> None:
    with pytest.raises(SlurmError, match="signal_via"):
        CliClient(signal_via="pyslurm")


def test_the_config_key_reaches_the_cli_client() -> None:
    from slurm_hooks.core.config import Config
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.slurm.factory import client_from_config

    client = client_from_config(Config())
    assert isinstance(client, CliClient) and client.signal_via == "auto"
    client = client_from_config(Config(data={"general": {"slurm_signal": "scancel"}}))
    assert isinstance(client, CliClient) and client.signal_via == "scancel"
    with pytest.raises(ConfigError, match="slurm_signal"):
        _ = Config(data={"general": {"slurm_signal": "libslurm"}}).general
