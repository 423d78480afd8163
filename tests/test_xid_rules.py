"""Multi-event XID rules, table-driven: log text in, (code, status, action) out."""

from __future__ import annotations

import pytest

from slurm_hooks.core.model import Action, Status
from slurm_hooks.detect.xid.pci import GpuRef
from slurm_hooks.detect.xid.rules import Incident, evaluate, nvlink74_classes, update_history
from slurm_hooks.detect.xid.scan import scan_text
from slurm_hooks.detect.xid.settings import XidSettings

NOW = 1_800_000_000.0
GPU_A, GPU_B = "0000:3b:00", "0000:86:00"


def x(
    xid: int, rest: str, pci: str = GPU_A, pid: int | str = "'<unknown>'", t: float | None = None
) -> str:
    stamp = f"{t:.6f}" if t is not None else "1.000000"
    return f"[{stamp}] NVRM: Xid (PCI:{pci}): {xid}, pid={pid}, name=p, {rest}"


#: Who owned the processes the cases' lines name (pid -> user).
OWNERS = {5: "alice", 6: "bob", 7: "carol", 200: "dave"}


def verdicts(
    lines: list[str],
    history: list[Incident] | None = None,
    owners: dict[int, str] | None = None,
    **settings: object,
) -> dict[str, tuple[Status, Action]]:
    res = scan_text("\n".join(lines) + "\n")
    found = evaluate(
        res.aggregates,
        now=NOW,
        history=history or [],
        settings=XidSettings(**settings),  # type: ignore[arg-type]
        owners=OWNERS if owners is None else owners,
    )
    return {f"{f.code}@{f.component.pci}": (f.status, f.action) for f in found}


A, B = GPU_A + ".0", GPU_B + ".0"
FAIL, WARN, OK = Status.FAIL, Status.WARN, Status.OK

CASES = [
    (
        "79 alone: reboot",
        [x(79, "GPU has fallen off the bus.")],
        {f"XID79@{A}": (FAIL, Action.REBOOT)},
    ),
    (
        "94 contained: restart app",
        [x(94, "Contained ECC error", pid=12)],
        {f"XID94@{A}": (WARN, Action.RESTART_APP)},
    ),
    (
        "95 uncontained: reset",
        [x(95, "Uncontained ECC error")],
        {f"XID95@{A}": (FAIL, Action.RESET_GPU)},
    ),
    ("48 alone: reset", [x(48, "DBE")], {f"XID48@{A}": (FAIL, Action.RESET_GPU)}),
    (
        "48 with 63 on the same GPU: drain and reset",
        [x(48, "DBE"), x(63, "Row Remapper: New row marked for remapping")],
        {f"XID48@{A}": (FAIL, Action.DRAIN), f"XID63@{A}": (OK, Action.IGNORE)},
    ),
    (
        "48 with 64 on another GPU: still just reset",
        [x(48, "DBE"), x(64, "Row remapping failed", pci=GPU_B)],
        {f"XID48@{A}": (FAIL, Action.RESET_GPU), f"XID64@{B}": (FAIL, Action.RESET_GPU)},
    ),
    (
        "13 once: app fault",
        [x(13, "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address", pid=5)],
        {f"XID13@{A}": (WARN, Action.RESTART_APP)},
    ),
    (
        "13 burst from one process: still one incident",
        [x(13, f"Graphics Exception: ESR 0x{i:x}=0x1", pid=5) for i in range(40)],
        {f"XID13@{A}": (WARN, Action.RESTART_APP)},
    ),
    (
        "13 from three processes on one GPU: hardware suspect",
        [x(13, "Graphics Exception", pid=p) for p in (5, 6, 7)],
        {f"XID13@{A}": (FAIL, Action.DRAIN)},
    ),
    (
        "31 from three processes on three GPUs: application",
        [
            x(31, "MMU Fault", pci=pci, pid=p)
            for p, pci in ((5, GPU_A), (6, GPU_B), (7, "0000:af:00"))
        ],
        {
            f"XID31@{A}": (WARN, Action.RESTART_APP),
            f"XID31@{B}": (WARN, Action.RESTART_APP),
            "XID31@0000:af:00.0": (WARN, Action.RESTART_APP),
        },
    ),
    (
        "45 following another XID: ignored",
        [x(79, "GPU has fallen off the bus."), x(45, "Ch 00000001 caused by previous Xid 79")],
        {f"XID79@{A}": (FAIL, Action.REBOOT), f"XID45@{A}": (OK, Action.IGNORE)},
    ),
    ("45 alone: restart", [x(45, "Ch 00000001")], {f"XID45@{A}": (WARN, Action.RESTART_APP)}),
    (
        "154 overrides a guess (31 -> node reboot)",
        [
            x(31, "MMU Fault", pid=9),
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
        ],
        {f"XID31@{A}": (FAIL, Action.REBOOT), f"XID154@{A}": (FAIL, Action.REBOOT)},
    ),
    (
        "154 drain and reset on 149",
        [
            "NVRM: Xid (PCI:0018:01:00): 149, NETIR_INT  Fatal   XC0 i0 Link -1",
            "NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)",
        ],
        {"XID149@0018:01:00.0": (FAIL, Action.DRAIN), "XID154@0018:01:00.0": (FAIL, Action.DRAIN)},
    ),
    (
        "154 on one GPU leaves the other alone",
        [
            x(94, "Contained", pci=GPU_B, pid=3),
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        ],
        {f"XID94@{B}": (WARN, Action.RESTART_APP), f"XID154@{A}": (FAIL, Action.RESET_GPU)},
    ),
    (
        "154 back to None is informational",
        [
            "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
            x(94, "Contained", pid=2),
        ],
        {f"XID154@{A}": (OK, Action.NONE), f"XID94@{A}": (WARN, Action.RESTART_APP)},
    ),
    (
        "74 with a hardware bit (reg2 bit16): drain",
        [x(74, "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")],
        {f"XID74@{A}": (FAIL, Action.DRAIN)},
    ),
    (
        "74 ignorable bits only",
        [x(74, "NVLink: fatal error detected on link 3(0x800001, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")],
        {f"XID74@{A}": (OK, Action.IGNORE)},
    ),
    (
        "74 ECC threshold only: warn, keep running",
        [x(74, "NVLink: fatal error detected on link 3(0x0, 0x0, 0x0, 0x0, 0x100000, 0x0, 0x0)")],
        {f"XID74@{A}": (WARN, Action.NONE)},
    ),
    (
        "74 sympathetic with another XID: follow the other",
        [
            x(74, "NVLink: fatal error detected on link 3(0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"),
            x(79, "GPU has fallen off the bus."),
        ],
        {f"XID74@{A}": (OK, Action.IGNORE), f"XID79@{A}": (FAIL, Action.REBOOT)},
    ),
    (
        "74 sympathetic alone: reset",
        [x(74, "NVLink: fatal error detected on link 3(0x2, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)")],
        {f"XID74@{A}": (FAIL, Action.RESET_GPU)},
    ),
    (
        "74 without registers: drain",
        [x(74, "NVLink: fatal error detected on link 2")],
        {f"XID74@{A}": (FAIL, Action.DRAIN)},
    ),
    (
        "144 nonfatal: ignore",
        [
            "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"
        ],
        {"XID144@0000:01:00.0": (OK, Action.IGNORE)},
    ),
    (
        "149 fatal: reset",
        [
            "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
        ],
        {"XID149@0000:00:00.0": (FAIL, Action.RESET_GPU)},
    ),
    (
        "145 RLW_REMAP nonfatal: restart app (XID_154_EVAL)",
        [
            "NVRM: Xid (PCI:0000:01:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 4 (0x00000082 0x00000001 0x0 0x0 0x0 0x0)"
        ],
        {"XID145@0000:01:00.0": (WARN, Action.RESTART_APP)},
    ),
    (
        "119 GSP timeout: reset",
        [x(119, "Timeout waiting for RPC from GSP! Expected function 10 (FREE)", pid=4)],
        {f"XID119@{A}": (FAIL, Action.RESET_GPU)},
    ),
    (
        "43 app stopped: ignore",
        [x(43, "channel 0x0b00000a", pid=4)],
        {f"XID43@{A}": (OK, Action.IGNORE)},
    ),
    (
        "54 aux power: drain for mechanicals",
        [x(54, "Auxiliary power is not connected")],
        {f"XID54@{A}": (FAIL, Action.DRAIN)},
    ),
    (
        "unused XID 58 on a new GPU: contact support",
        [x(58, "FB memory error")],
        {f"XID58@{A}": (FAIL, Action.REPLACE)},
    ),
    (
        "unknown XID 999: report only",
        [x(999, "something new")],
        {f"XID999@{A}": (WARN, Action.NONE)},
    ),
    (
        "SXID fatal: reboot",
        [
            "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 30 sourcetrack TCEN0 crumbstore ECC DBE Error"
        ],
        {"SXID24007@0000:86:00.0": (FAIL, Action.REBOOT)},
    ),
    (
        "SXID non-fatal: ignore",
        [
            "nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
        ],
        {"SXID12028@0000:86:00.0": (OK, Action.IGNORE)},
    ),
    (
        "SXID unknown severity: report",
        ["nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 11111, Data {0x1}"],
        {"SXID11111@0000:86:00.0": (WARN, Action.NONE)},
    ),
]


@pytest.mark.parametrize(("name", "lines", "want"), CASES, ids=[c[0] for c in CASES])
def test_rules(name: str, lines: list[str], want: dict[str, tuple[Status, Action]]) -> None:
    assert verdicts(lines) == want


def test_repeat_counts_history_from_earlier_runs() -> None:
    hist = [
        Incident("XID13", A, 101, NOW - 3600, user="alice"),
        Incident("XID13", A, 102, NOW - 7200, user="bob"),
        Incident("XID13", B, 103, NOW - 60),  # other GPU: does not count
        Incident("XID13", A, 104, NOW - 3 * 86400),  # outside the window
    ]
    assert verdicts([x(13, "Graphics Exception", pid=200)], hist) == {
        f"XID13@{A}": (FAIL, Action.DRAIN)
    }
    assert verdicts([x(13, "Graphics Exception", pid=200)], hist[:1]) == {
        f"XID13@{A}": (WARN, Action.RESTART_APP)
    }
    # configurable threshold
    assert verdicts([x(13, "Graphics Exception", pid=200)], hist[:1], repeat_count=2) == {
        f"XID13@{A}": (FAIL, Action.DRAIN)
    }


def test_repeat_without_pids_counts_bursts() -> None:
    burst = lambda t: Incident("XID31", A, None, t)  # noqa: E731
    # three bursts an hour apart (whose processes: unknown, so any incidents count)
    hist = [burst(NOW - 7200), burst(NOW - 7190), burst(NOW - 3600)]
    assert verdicts([x(31, "MMU Fault")], hist, repeat_users=1) == {
        f"XID31@{A}": (FAIL, Action.DRAIN)
    }
    # all within one burst window: one incident plus the new one
    hist2 = [burst(NOW - 30), burst(NOW - 20), burst(NOW - 10)]
    assert verdicts([x(31, "MMU Fault")], hist2, repeat_users=1) == {
        f"XID31@{A}": (WARN, Action.RESTART_APP)
    }
    # Bursts of processes nobody could name blame no GPU by default.
    assert verdicts([x(31, "MMU Fault")], hist) == {f"XID31@{A}": (WARN, Action.RESTART_APP)}


def test_one_users_repeats_are_the_application_until_another_users_processes_see_it() -> None:
    """A user's own code raises XID 13 or 31 at will: three incidents on
    one GPU from one user's processes are theirs; the GPU is blamed once a
    second user's processes see it fail."""
    lines = [x(13, "Graphics Exception", pid=p) for p in (5, 6, 7)]
    mine = {5: "mallory", 6: "mallory", 7: "mallory"}
    assert verdicts(lines, owners=mine) == {f"XID13@{A}": (WARN, Action.RESTART_APP)}
    assert verdicts(lines, owners={}) == {f"XID13@{A}": (WARN, Action.RESTART_APP)}
    res = scan_text("\n".join(lines) + "\n")
    (f,) = evaluate(res.aggregates, now=NOW, owners=mine)
    assert f.values["users"] == 1 and f.values["process_users"] == "mallory"
    assert "from the processes of 1 user(s)" in f.message
    # History of that user's earlier incidents, then another user's process.
    hist = [Incident("XID13", A, p, NOW - 600 * p, user="mallory") for p in (1, 2, 3)]
    assert verdicts([x(13, "Graphics Exception", pid=200)], hist, owners=mine) == {
        f"XID13@{A}": (WARN, Action.RESTART_APP)
    }
    assert verdicts([x(13, "Graphics Exception", pid=200)], hist) == {
        f"XID13@{A}": (FAIL, Action.DRAIN)
    }
    # A site that counts any incidents says so.
    assert verdicts(lines, owners=mine, repeat_users=1) == {f"XID13@{A}": (FAIL, Action.DRAIN)}


def test_48_pairs_with_63_from_history() -> None:
    hist = [Incident("XID63", A, None, NOW - 600)]
    assert verdicts([x(48, "DBE")], hist)[f"XID48@{A}"] == (FAIL, Action.DRAIN)
    old = [Incident("XID63", A, None, NOW - 7200)]
    assert verdicts([x(48, "DBE")], old)[f"XID48@{A}"] == (FAIL, Action.RESET_GPU)


def test_finding_shape() -> None:
    lines = [x(79, "GPU has fallen off the bus.", pid=p, t=10.0 + p) for p in (1, 2, 2)]
    res = scan_text("\n".join(lines))
    (f,) = evaluate(res.aggregates, now=NOW, gpus={A: GpuRef(A, 3, "GPU-abc")})
    assert f.check == "xid" and f.code == "XID79"
    assert (f.component.kind, f.component.index, f.component.uuid, f.component.pci) == (
        "gpu",
        3,
        "GPU-abc",
        A,
    )
    assert f.values["count"] == 3 and f.values["distinct"] == 2
    assert f.values["first_monotonic"] == 11.0 and f.values["last_monotonic"] == 12.0
    assert f.values["pids"] == "1,2" and f.values["bucket"] == "RESTART_BM"
    assert "gpu3" in f.message and "(x3)" in f.message
    f.to_dict()  # serialisable


def test_override_records_the_catalogue_action() -> None:
    lines = [
        x(94, "Contained", pid=2),
        "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
    ]
    res = scan_text("\n".join(lines))
    f94 = next(f for f in evaluate(res.aggregates, now=NOW) if f.code == "XID94")
    assert (
        f94.values["overridden_by"] == "XID154" and f94.values["catalogue_action"] == "restart_app"
    )


def test_update_history_prunes_and_caps() -> None:
    s = XidSettings(history_max=3)
    old = [Incident("XID13", A, i, NOW - 10 * 86400) for i in range(5)] + [
        Incident("XID13", A, 9, NOW - 10)
    ]
    res = scan_text("\n".join(x(13, "e", pid=p) for p in (20, 21, 22)))
    new = update_history(old, res.aggregates, NOW, s)
    assert len(new) == 3 and all(i.t >= NOW - 86400 for i in new)


def test_nvlink74_classes() -> None:
    assert nvlink74_classes((0x1, 0, 0, 0, 0, 0, 0)) == ["ignore"]
    assert nvlink74_classes((0x30, 0, 0, 0, 0)) == ["ecc"]
    assert nvlink74_classes((0, 0xFFFF, 0, 0, 0)) == []  # register 2 not decoded
    assert nvlink74_classes((0x8, 0, 0, 0, 0)) == ["unknown"]
    assert nvlink74_classes((0, 0, 0, 0x40000, 0x800000)) == ["sympathetic", "threshold"]
