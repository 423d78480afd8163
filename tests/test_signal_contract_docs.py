"""One description of what a job receives (docs/signals.md), matching the
code's defaults and linked from every page that talks about it; the lab
half of the contract is tests/test_signal_contract_lab.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_hooks.act.engine import RESTARTABLE_END_STATES
from slurm_hooks.decide import PolicyConfig

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = ROOT / "docs" / "signals.md"


def test_signals_doc_states_the_code_defaults() -> None:
    text = SIGNALS.read_text()
    p = PolicyConfig()
    assert (
        f"| `signal_batch` | `{p.signal_batch}` | "
        f"`scancel --ctld -v --batch --signal={p.signal_batch}" in text
    )
    assert (
        f"| `signal_steps` | `{p.signal_steps}` | `scancel --ctld -v --signal={p.signal_steps} "
        in text
    )
    assert f"default {p.grace_seconds:g} s" in text
    for state in RESTARTABLE_END_STATES:
        assert f"`{state}`" in text, state


@pytest.mark.parametrize(
    ("page", "link"),
    [
        ("README.md", "docs/signals.md"),
        ("docs/demo.md", "signals.md"),
        ("docs/runbook.md", "signals.md"),
        ("lab/slurm_hooks_lab/train/README.md", "../../../docs/signals.md"),
    ],
)
def test_pages_point_to_the_one_description(page: str, link: str) -> None:
    path = ROOT / page
    assert f"]({link})" in path.read_text()
    assert (path.parent / link).resolve() == SIGNALS.resolve()
    # The contradiction issue 17 found must not come back.
    assert "is not requeued. The demo sets `signal_steps" not in path.read_text()
