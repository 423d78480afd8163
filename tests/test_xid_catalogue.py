"""The XID catalogue data file and its mapping to slurm-hooks actions."""

from __future__ import annotations

import json

import pytest

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Action, Status
from slurm_hooks.detect.xid.catalogue import load_catalogue, parse_catalogue

#: XIDs the issue names for A100 and newer, plus the newest catalogue rows.
REQUIRED = [8, 13, 31, 32, 38, 43, 45, 48, 56, 57, 58, 61, 62, 63, 64, 65, 68, 69, 74, 79, 92, 94, 95,
            109, 110, 119, 120, 121, 122, 123, 124, 136, 137, 140, 143, *range(144, 151), 151, 152,
            154, 155, 156, 157, 158, 159, *range(160, 173)]  # fmt: skip


def test_covers_every_required_xid() -> None:
    cat = load_catalogue()
    missing = [x for x in REQUIRED if cat.get(x) is None]
    assert missing == []
    assert sorted(cat.xids) == list(range(1, 173))


def test_loaded_once_and_cached() -> None:
    assert load_catalogue() is load_catalogue()


@pytest.mark.parametrize(
    ("xid", "immediate", "action", "status"),
    [
        (79, "RESTART_BM", Action.REBOOT, Status.FAIL),
        (94, "RESTART_APP", Action.RESTART_APP, Status.WARN),
        (95, "RESET_GPU", Action.RESET_GPU, Status.FAIL),
        (63, "IGNORE", Action.IGNORE, Status.OK),
        (48, "WORKFLOW_XID_48", Action.RESET_GPU, Status.FAIL),
        (74, "WORKFLOW_NVLINK_ERR", Action.DRAIN, Status.FAIL),
        (149, "WORKFLOW_NVLINK5_ERR", Action.DRAIN, Status.FAIL),
        (54, "CHECK_MECHANICALS", Action.DRAIN, Status.FAIL),
        (142, "CONTACT_SUPPORT", Action.REPLACE, Status.FAIL),
        (154, "XID_154", Action.NONE, Status.OK),
        (119, "RESET_GPU", Action.RESET_GPU, Status.FAIL),
    ],
)
def test_bucket_mapping(xid: int, immediate: str, action: Action, status: Status) -> None:
    cat = load_catalogue()
    info = cat.get(xid)
    assert info is not None and info.immediate == immediate
    b = cat.bucket_for(xid)
    assert (b.action, b.status) == (action, status)


def test_rows_are_consistent() -> None:
    cat = load_catalogue()
    for info in cat.xids.values():
        assert info.bucket in cat.buckets
        assert set(info.applies_to) <= {"A100", "H100", "B100", "GB200"}
        if info.immediate is None:  # no NVIDIA bucket: our own call, marked as such
            assert info.confidence in ("low", "medium") and "slurm-hooks" in info.source
    assert cat.get(74).applies_to == ("A100", "H100")
    assert cat.get(121).applies_to == ("GB200",)
    assert cat.bucket_for(12345).name == "MONITOR"
    assert cat.recovery_actions[2] == ("Node Reboot Required", Action.REBOOT)


def test_invalid_catalogue_names_the_row(tmp_path) -> None:
    data = json.loads(
        json.dumps(
            {
                "buckets": {"MONITOR": {"action": "none", "status": "WARN"}},
                "xids": [{"xid": 1, "mnemonic": "A", "name": "a", "bucket": "NOPE"}],
            }
        )
    )
    with pytest.raises(ConfigError, match="xid 1: unknown bucket"):
        parse_catalogue(data)
    p = tmp_path / "c.json"
    p.write_text("{")
    with pytest.raises(ConfigError):
        load_catalogue(str(p))
