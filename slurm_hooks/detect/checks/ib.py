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
from slurm_hooks.detect.checks.base import CheckContext, Problem, ok
from slurm_hooks.detect.profiles import IbExpect, as_profile

if TYPE_CHECKING:
    from slurm_hooks.detect.probes.sysfs import IbPort

IB_PORT_DOWN = Problem("IB_PORT_DOWN", Status.FAIL, Action.DRAIN)
IB_RATE = Problem("IB_RATE", Status.FAIL, Action.DRAIN)
IB_PORT_MISSING = Problem("IB_PORT_MISSING", Status.FAIL, Action.DRAIN)


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
                    message = f"port {dev}/{port} not found in sysfs"
                    where = {"device": dev, "port": port}
                    findings.append(
                        IB_PORT_MISSING.finding(self.name, message, _nic(f"{dev}/{port}"), where)
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
                message = f"port {p.name} is {p.state_text or '?'} / {p.phys_state_text or '?'}"
                findings.append(IB_PORT_DOWN.finding(self.name, message, _nic(p.name), values))
                continue
            active.append(p)
            if expect.rate_gbps is not None and (p.rate_gbps or 0) < expect.rate_gbps:
                message = (
                    f"port {p.name} runs at {p.rate_text or '?'}, "
                    f"expected {expect.rate_gbps:g} Gb/sec"
                )
                slow = {**values, "expected_gbps": expect.rate_gbps}
                findings.append(IB_RATE.finding(self.name, message, _nic(p.name), slow))
        if expect.count is not None and len(candidates) < expect.count:
            message = (
                f"{len(candidates)} port(s) match {expect.device_pattern!r}"
                f"{' ' + expect.link_layer if expect.link_layer else ''}, expected {expect.count}"
            )
            found = {"found": len(candidates), "expected": expect.count}
            findings.append(IB_PORT_MISSING.finding(self.name, message, _nic(), found))
        if not findings:
            findings.append(ok(self.name, f"{len(active)} port(s) active", active=len(active)))
        return findings


def _selected(p: IbPort, expect: IbExpect) -> bool:
    if not fnmatch.fnmatchcase(p.device, expect.device_pattern):
        return False
    return expect.link_layer is None or p.link_layer == expect.link_layer


def _nic(name: str | None = None) -> Component:
    return Component("nic", name=name)
