"""Side by side with NHC ([checks.site] compare_with): disagreements reported.

NHC is a stub here (a script with NHC's exit status and its "Health check
failed:" line, the format of NHC's ``die``); tests/test_site_checks.py covers
the imported checks' own verdicts.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from site_node import Node

from slurm_hooks.core.model import Action, Status
from slurm_hooks.decide.config import PolicyConfig
from slurm_hooks.decide.decide import decide
from slurm_hooks.decide.decision import DecisionKind
from slurm_hooks.detect.site.spec import SiteChecksConfig

ROOT_RW = SiteChecksConfig.from_section(
    [{"name": "root-rw", "kind": "fs_mount", "paths": ["/"], "mode": "rw"}],
    path=None,
    prefix="site_checks",
)
NHC_FAILS = (
    "echo 'ERROR:  nhc:  Health check failed:  check_fs_mount:  / mounted read-only'\nexit 1\n"
)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    n.stub("nhc", "exit 0\n")
    return n


def run(node, **settings):
    return node.run(ROOT_RW, compare_with=str(node.bin / "nhc"), **settings)


def by_code(findings):
    return {f.code: f for f in findings}


def test_agreeing_on_a_healthy_node(node):
    f = by_code(run(node))
    assert f["OK"].status is Status.OK
    assert not set(f) & {"NHC_ONLY_FAILS", "SITE_ONLY_FAILS"}


def test_nhc_fails_and_the_imported_checks_pass(node):
    node.stub("nhc", NHC_FAILS)
    (d,) = [f for f in run(node) if f.code == "NHC_ONLY_FAILS"]
    assert (d.status, d.action) == (Status.WARN, Action.NONE)
    assert "NHC fails (check_fs_mount:  / mounted read-only)" in d.message
    assert d.values["nhc_rc"] == 1


def test_the_imported_checks_fail_and_nhc_passes_and_nothing_is_drained(node):
    node.write("proc/self/mounts", "/dev/sda1 / ext4 ro 0 0\n")
    findings = run(node)
    codes = by_code(findings)
    assert "root-rw" in codes["SITE_ONLY_FAILS"].message
    # While comparing, NHC still owns the node: ours report, they do not drain.
    assert (codes["FS_MOUNT"].status, codes["FS_MOUNT"].action) == (Status.WARN, Action.NONE)
    assert not [f for f in findings if f.action is Action.DRAIN]


def test_both_fail_agree_and_enforce_drains(node):
    node.stub("nhc", NHC_FAILS)
    node.write("proc/self/mounts", "/dev/sda1 / ext4 ro 0 0\n")
    assert not set(by_code(run(node))) & {"NHC_ONLY_FAILS", "SITE_ONLY_FAILS"}
    enforced = by_code(run(node, enforce=True))
    assert (enforced["FS_MOUNT"].status, enforced["FS_MOUNT"].action) == (Status.FAIL, Action.DRAIN)


def test_nhc_that_hangs_gives_no_verdict(node):
    node.stub("nhc", "sleep 5\n")
    (f,) = [f for f in run(node, compare_timeout_s=0.3) if f.component.name == "nhc-compare"]
    assert f.status is Status.UNKNOWN and "no verdict" in f.message


def test_nhc_gets_slurmds_node_name(node):
    node.stub("nhc", f'echo "$SLURMD_NODENAME" > {node.root}/seen\nexit 0\n')
    run(node)
    assert (node.root / "seen").read_text().strip() == "n0001"


def test_a_disagreement_is_logged_by_the_policy_not_drained(node):
    node.stub("nhc", NHC_FAILS)
    findings = run(node)
    decisions = decide(findings, None, None, None, PolicyConfig(), datetime.now(UTC), node="n0001")
    (d,) = [d for d in decisions if d.code == "NHC_ONLY_FAILS"]
    assert d.kind is DecisionKind.LOG  # recorded in the audit log and the fault history
    assert "NHC fails (check_fs_mount:  / mounted read-only)" in d.explanation
