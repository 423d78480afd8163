"""InfiniBand/RoCE ports: present, ACTIVE and LinkUp, at the expected rate.

Read from sysfs (``probes.sysfs``), root injectable as service
``sysfs_root`` or ``[checks] sysfs_root``.  A port that is down, or up at a
lower rate (a bad cable or transceiver trains NDR 400 down to 200 or
HDR 100), slows every multi-node job on the node: FAIL and drain.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.detect.checks.base import CheckContext, ok
from slurm_hooks.detect.profiles import IbExpect, as_profile

if TYPE_CHECKING:
    from slurm_hooks.detect.probes.sysfs import IbPort


class IbCheck:
    name: ClassVar[str] = "ib"
    settings_class: ClassVar[type | None] = None
    phases: ClassVar[frozenset[Phase]] = frozenset({Phase.HEALTHCHECK, Phase.ACCEPTANCE})

    def gather(self, ctx: CheckContext) -> list[IbPort] | None:
        if as_profile(ctx.profile).ib is None:
            return None
        from slurm_hooks.detect.probes.sysfs import read_ib_ports  # only where ports are expected

        root = ctx.services.get("sysfs_root", "/sys")
        return read_ib_ports(root)

    def judge(self, data: list[IbPort] | None, ctx: CheckContext) -> list[Finding]:
        expect = as_profile(ctx.profile).ib
        if data is None or expect is None:
            return [ok(self.name, "not applicable: profile expects no InfiniBand/RoCE ports")]
        findings: list[Finding] = []
        by_name = {(p.device, p.port): p for p in data}
        if expect.devices:
            candidates = []
            for dev, port in expect.wanted_ports():
                p = by_name.get((dev, port))
                if p is None:
                    findings.append(
                        _finding(
                            "IB_PORT_MISSING",
                            f"{dev}/{port}",
                            f"port {dev}/{port} not found in sysfs",
                            {"device": dev, "port": port},
                        )
                    )
                else:
                    candidates.append(p)
        else:
            candidates = [p for p in data if _selected(p, expect)]
        active = []
        for p in candidates:
            values: dict[str, Any] = {
                "state": p.state_text,
                "phys_state": p.phys_state_text,
                "rate_gbps": p.rate_gbps,
                "link_layer": p.link_layer,
            }
            if not p.active:
                findings.append(
                    _finding(
                        "IB_PORT_DOWN",
                        p.name,
                        f"port {p.name} is {p.state_text or '?'} / {p.phys_state_text or '?'}",
                        values,
                    )
                )
                continue
            active.append(p)
            if expect.rate_gbps is not None and (p.rate_gbps or 0) < expect.rate_gbps:
                findings.append(
                    _finding(
                        "IB_RATE",
                        p.name,
                        f"port {p.name} runs at {p.rate_text or '?'}, expected {expect.rate_gbps:g} Gb/sec",
                        {**values, "expected_gbps": expect.rate_gbps},
                    )
                )
        if expect.count is not None and len(candidates) < expect.count:
            findings.append(
                Finding(
                    check="ib",
                    status=Status.FAIL,
                    code="IB_PORT_MISSING",
                    message=f"{len(candidates)} port(s) match {expect.device_pattern!r}"
                    f"{' ' + expect.link_layer if expect.link_layer else ''}, expected {expect.count}",
                    component=Component("nic"),
                    action=Action.DRAIN,
                    values={"found": len(candidates), "expected": expect.count},
                )
            )
        if not findings:
            findings.append(ok(self.name, f"{len(active)} port(s) active", active=len(active)))
        return findings


def _selected(p: IbPort, expect: IbExpect) -> bool:
    if not fnmatch.fnmatchcase(p.device, expect.device_pattern):
        return False
    return expect.link_layer is None or p.link_layer == expect.link_layer


def _finding(code: str, name: str, message: str, values: dict[str, Any]) -> Finding:
    return Finding(
        check="ib",
        status=Status.FAIL,
        code=code,
        message=message,
        component=Component("nic", name=name),
        action=Action.DRAIN,
        values=values,
    )
