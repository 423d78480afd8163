"""Side by side with NHC on the real lab (docs/nhc.md, "A week side by side").

slurmd runs our healthcheck shim every 2 s; the site check runs the NHC
stand-in (``lab/slurm_hooks_lab/nhc_standin``: NHC's documented helper
rules, its verdict set by a file) beside an imported site check whose
verdict a flag file sets.  NHC keeps marking the node; disagreements land
in the audit log (NHC_ONLY_FAILS, SITE_ONLY_FAILS) and nothing of ours drains.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_hooks_lab.hooks import install

from slurm_hooks.core.reason import is_ours

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STANDIN = Path(__file__).resolve().parent.parent / "lab" / "slurm_hooks_lab" / "nhc_standin"
NODE = "n3"


@pytest.fixture
def side_by_side(fresh_lab, tmp_path):
    lab = fresh_lab
    state = tmp_path / "nhc"
    state.mkdir()
    state.chmod(0o755)
    tmp_path.chmod(0o755)
    wrapper = state / "nhc"
    wrapper.write_text(f'#!/bin/sh\nNHC_STANDIN_DIR={state} exec {STANDIN} "$@"\n')
    wrapper.chmod(0o755)
    flag = state / "scratch.ok"
    flag.write_text("ok\n")
    hooks = install(lab, healthcheck_interval=2)
    try:
        hooks.add_config(
            NODE,
            f'[checks.site]\ncompare_with = "{wrapper}"\ncompare_timeout_s = 10\n'
            f'\n[[site_checks]]\nname = "scratch"\nkind = "file_test"\n'
            f'paths = ["{flag}"]\ntests = ["f"]\n',
        )
        yield lab, hooks, state, flag
    finally:
        hooks.finish()


def disagreements(hooks) -> list[str]:
    return [
        e.get("why", "")
        for e in hooks.audit(NODE)
        if e.get("action") == "decision" and e.get("code") in ("NHC_ONLY_FAILS", "SITE_ONLY_FAILS")
    ]


def reason(lab) -> str:
    return lab.client().get_node(NODE).reason or ""


def test_disagreements_are_audited_and_nhc_keeps_the_node(side_by_side):
    lab, hooks, state, flag = side_by_side
    # Both pass: our health check ran (it writes its XID state) and nothing disagrees.
    lab.wait_for((hooks.node(NODE).state_dir / "xid").is_dir, 30, what="our healthcheck run")
    lab.wait_for(lambda: (state / f"{NODE}.log").exists(), 30, what="NHC run by the site check")
    assert disagreements(hooks) == []

    # NHC fails, the imported check passes: NHC drains with its note, we audit it.
    (state / f"{NODE}.fail").write_text("check_fs_mount: /scratch not mounted\n")
    lab.wait_for(lambda: reason(lab) == "NHC: check_fs_mount: /scratch not mounted", 30,
                 what="NHC's drain")  # fmt: skip
    lab.wait_for(lambda: any("NHC fails" in w for w in disagreements(hooks)), 30,
                 what="the disagreement in the audit log")  # fmt: skip

    # NHC passes again and resumes; the imported check fails: audited, not drained.
    flag.unlink()
    (state / f"{NODE}.fail").unlink()
    lab.wait_for(lambda: any("the imported checks fail (scratch)" in w for w in disagreements(hooks)),
                 30, what="the other disagreement")  # fmt: skip
    node = lab.client().get_node(NODE)
    assert not node.drained or not is_ours(node.reason)
