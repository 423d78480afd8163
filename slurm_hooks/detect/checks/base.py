"""The contract every check follows: gather, then judge.

``gather`` is the only part that touches the machine (NVML, sysfs, the
kernel log, a subprocess through ``probes.commands``).  ``judge`` is a pure
function of what was gathered and the node's profile, so tests feed it
recorded real outputs and scenario data without hardware.

A check that cannot gather (NVML missing, a file unreadable, a timeout)
reports UNKNOWN with the error: it never crashes the run and never
pretends the node is healthy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from slurm_hooks.core.model import NODE, Action, Component, Finding, Phase, Status
from slurm_hooks.core.record import field, record

if TYPE_CHECKING:
    from datetime import datetime

T = TypeVar("T")


def utc_now() -> datetime:
    """The default clock of a :class:`CheckContext`: now, in UTC.  datetime
    is imported on the first call: a health check with nothing to report
    never asks the time."""
    from datetime import UTC, datetime

    return datetime.now(UTC)


#: Keys of every ``[checks.<name>]`` table that the runner reads itself; the
#: rest belongs to the check (its ``Settings`` dataclass, if it has one).
COMMON_SETTINGS = frozenset({"enabled", "timeout_s", "phases"})


@record
class CheckContext:
    """What a check may use while gathering.  Built once per hook run.

    ``profile`` is the node's resolved per-SKU profile (a mapping from the
    TOML profile table; keys documented with each check).  ``settings`` is
    the check's own ``[checks.<name>]`` table (thresholds, ``enabled``).
    ``services`` carries injectable ports (``nvml``, ``kernel_log``,
    ``clock`` ...) so tests pass fakes in instead of patching modules.
    """

    node: str
    phase: Phase
    profile: Mapping[str, Any] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    state_dir: str = "/var/lib/slurm-hooks"
    services: Mapping[str, Any] = field(default_factory=dict)
    now: Callable[[], datetime] = utc_now
    #: The config file the settings came from, so errors can name it.
    config_path: str | None = None

    def service(self, name: str, factory: Callable[[], Any] | None = None) -> Any:
        """An injected service, or ``factory()`` when none was injected."""
        if name in self.services:
            return self.services[name]
        if factory is None:
            raise KeyError(f"no service {name!r} injected and no default")
        return factory()

    def host(self) -> Any:
        """The host probe (memory, mounts, disk usage): an injected ``psutil``
        service (psutil itself or a fake), else the stdlib reader of /proc."""
        if "psutil" in self.services:
            return self.services["psutil"]
        from slurm_hooks.detect.probes.host import HOST

        return HOST

    def settings_as(self, cls: type[T], check: str) -> T:
        """``settings`` (less the runner's own keys) as the check's frozen
        dataclass; unknown keys and bad values raise ConfigError naming
        ``checks.<check>.<key>`` and the file."""
        from slurm_hooks.core.config import from_mapping

        data = {k: v for k, v in self.settings.items() if k not in COMMON_SETTINGS}
        return from_mapping(cls, data, path=self.config_path, prefix=f"checks.{check}")


class Check(Protocol):
    """One health check.  Implementations are small classes registered in
    ``checks.registry`` under ``name``."""

    name: ClassVar[str]
    #: Phases this check may run in.
    phases: ClassVar[frozenset[Phase]]

    def gather(self, ctx: CheckContext) -> Any:
        """Read the machine; may raise any exception (reported as UNKNOWN)."""
        ...

    def judge(self, data: Any, ctx: CheckContext) -> list[Finding]:
        """Pure: findings from gathered data, ``ctx.profile`` and ``ctx.settings``."""
        ...


@record
class Problem:
    """One kind of finding a check reports: its stable code, its status and
    the action it recommends, as a row of the table in
    :mod:`slurm_hooks.detect.checks` says.  Declared once beside the check,
    so a judge names the kind it saw and says only where and why: a code,
    its status and its action are never spelled out twice."""

    code: str
    status: Status
    action: Action

    def finding(
        self,
        check: str,
        message: str,
        component: Component = NODE,
        values: Mapping[str, Any] | None = None,
    ) -> Finding:
        return Finding(
            check=check,
            status=self.status,
            code=self.code,
            message=message,
            component=component,
            action=self.action,
            values={} if values is None else values,
        )


def unknown(check: str, error: BaseException | str, component: Component | None = None) -> Finding:
    """The finding for a check that could not run."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return Finding(
        check=check,
        status=Status.UNKNOWN,
        code="CHECK_UNKNOWN",
        message=f"could not run: {text}",
        component=component or Component("node"),
        action=Action.NONE,
    )


def ok(
    check: str, message: str = "ok", component: Component | None = None, **values: Any
) -> Finding:
    return Finding(
        check=check,
        status=Status.OK,
        code="OK",
        message=message,
        component=component or Component("node"),
        values=values,
    )
