"""The registered check ``site``: every ``[[site_checks]]`` entry for this node.

Gather runs each applicable site check's gather (one :class:`~.gather.Facts`
shared by all, so the mount table and /proc are read once); judge turns
each verdict into one :class:`~slurm_hooks.core.model.Finding` of check
``site``, code the kind's (``FS_MOUNT``, ``PS_SERVICE`` ...), component
``site:<name>``: the reason, metrics and history of a built-in check.

With ``[checks.site] compare_with`` (the site's NHC) the check also runs
NHC, and a node on which the two verdicts differ gets a WARN
``NHC_ONLY_FAILS`` or ``SITE_ONLY_FAILS`` (audited and counted like any
finding; :mod:`.compare`).  While comparing,
the site checks report without draining unless ``enforce = true``: NHC
still owns the node's health.

Services (tests inject them): ``config`` (the Config), ``site_checks`` (a
parsed :class:`~.spec.SiteChecksConfig`), ``proc_root``, ``sysfs_root``,
``run_command``, ``statvfs``, ``node_features``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from slurm_hooks.core.model import Action, Component, Finding, Phase, Status
from slurm_hooks.core.reason import printable
from slurm_hooks.core.record import field, record
from slurm_hooks.detect.checks.base import CheckContext, ok
from slurm_hooks.detect.site.gather import Facts, Ran
from slurm_hooks.detect.site.spec import SiteCheck, SiteChecksConfig

NAME = "site"


@record
class Settings:
    #: The site's NHC (absolute path): run it too and report disagreements.
    compare_with: str = ""
    #: Arguments NHC gets (e.g. ["-c", "/etc/nhc/nhc.conf"]).
    compare_args: tuple[str, ...] = ()
    #: Seconds NHC may take (give NHC a shorter -t in compare_args); with
    #: the site checks it must fit in this check's timeout_s (25 s).
    compare_timeout_s: float = 20.0
    #: Whether site check failures drain while comparing (default: no).
    enforce: bool | None = None

    def validate(self) -> None:
        if self.compare_with and not self.compare_with.startswith("/"):
            raise ValueError(f"compare_with must be an absolute path, got {self.compare_with!r}")

    @property
    def enforcing(self) -> bool:
        return self.enforce if self.enforce is not None else not self.compare_with


@record
class Gathered:
    #: (check, data, error) per applicable check, in config order.
    results: tuple[tuple[SiteCheck, Any, BaseException | None], ...] = ()
    nhc: Ran | None = None
    features_error: str = ""
    skipped_for_features: tuple[str, ...] = field(default=())


def node_features(ctx: CheckContext) -> tuple[str, ...]:
    """The node's Slurm features: service ``node_features``, else
    ``scontrol show node -o`` (AvailableFeatures), asked only when a site
    check selects by feature."""
    if "node_features" in ctx.services:
        return tuple(ctx.services["node_features"])
    from slurm_hooks.detect.probes.commands import run

    out = run(["scontrol", "show", "node", "-o", "--", ctx.node], timeout=5.0).stdout
    for word in out.split():
        if word.startswith("AvailableFeatures="):
            value = word.partition("=")[2]
            return tuple(f for f in value.split(",") if f and f != "(null)")
    return ()


def site_config(ctx: CheckContext) -> SiteChecksConfig:
    if "site_checks" in ctx.services:
        cfg: SiteChecksConfig = ctx.services["site_checks"]
        return cfg
    from slurm_hooks.detect.site.spec import load_site_checks

    config = ctx.services.get("config")
    if config is None:
        return SiteChecksConfig()
    return load_site_checks(config)


def facts_for(ctx: CheckContext) -> Facts:
    kw: dict[str, Any] = {
        "proc": ctx.services.get("proc_root", "/proc"),
        "sys": ctx.services.get("sysfs_root", "/sys"),
    }
    config = ctx.services.get("config")
    if config is not None:
        kw["state_dir"] = config.general.state_dir
    run = ctx.services.get("run_command")
    if run is not None:
        kw["run"] = lambda argv, timeout: run(argv, timeout=timeout, check=False)
    for name in ("statvfs", "user_name", "group_name"):
        if name in ctx.services:
            kw[name] = ctx.services[name]
    return Facts(**kw)


#: Kinds whose gather waits on a program (a command, bash running a site's
#: NHC function): they start first, each in its own thread, so that their
#: waits overlap each other and the reads of the other checks.
SPAWNING = frozenset({"command", "nhc_function", "hw_mcelog", "dmi"})


def gather_all(
    checks: Sequence[SiteCheck], facts: Facts
) -> list[tuple[SiteCheck, Any, BaseException | None]]:
    """Each check's gather, results in config order.  The programs start
    before the reads and run side by side (NHC runs them one after another:
    the wall time of a run is then about its slowest program, not their
    sum); the waits are bounded by each program's own timeout."""
    import threading

    from slurm_hooks.detect.site.kinds import KINDS

    out: list[tuple[SiteCheck, Any, BaseException | None]] = [(c, None, None) for c in checks]

    def one(i: int) -> None:
        c = checks[i]
        try:
            out[i] = (c, KINDS[c.kind].gather(c.args, facts), None)
        except Exception as exc:  # noqa: BLE001 - this check is UNKNOWN, the rest run
            out[i] = (c, None, exc)

    spawning = [i for i, c in enumerate(checks) if c.kind in SPAWNING]
    threads = [
        threading.Thread(target=one, args=(i,), name=f"site-{checks[i].name}", daemon=True)
        for i in spawning
    ]
    for t in threads:
        t.start()
    for i in range(len(checks)):
        if checks[i].kind not in SPAWNING:
            one(i)
    for t in threads:
        t.join()
    return out


class SiteChecks:
    name: ClassVar[str] = NAME
    settings_class: ClassVar[type | None] = Settings
    phases: ClassVar[frozenset[Phase]] = frozenset(
        {Phase.HEALTHCHECK, Phase.PROLOG, Phase.EPILOG, Phase.ACCEPTANCE}
    )

    def gather(self, ctx: CheckContext) -> Gathered:
        s = ctx.settings_as(Settings, NAME)
        cfg = site_config(ctx)
        features: tuple[str, ...] | None = None
        features_error = ""
        if cfg.wants_features:
            try:
                features = node_features(ctx)
            except Exception as exc:  # noqa: BLE001 - reported, the other checks run
                features_error = f"{type(exc).__name__}: {exc}"
        checks = cfg.for_node(ctx.node, ctx.phase, features)
        skipped: tuple[str, ...] = ()
        if features is None and features_error:
            skipped = tuple(c.name for c in cfg.checks if c.hosts.feature and c.enabled)
        facts = facts_for(ctx)
        results = gather_all(checks, facts)
        nhc = None
        if s.compare_with:
            from slurm_hooks.detect.site.compare import run_nhc

            nhc = run_nhc(s.compare_with, s.compare_args, s.compare_timeout_s, ctx.node,
                          ctx.services.get("run_command"))  # fmt: skip
        return Gathered(tuple(results), nhc, features_error, skipped)

    def judge(self, data: Gathered, ctx: CheckContext) -> list[Finding]:
        s = ctx.settings_as(Settings, NAME)
        findings = [f for c, d, e in data.results for f in judge_one(c, d, e, s.enforcing)]
        if data.features_error:
            findings.append(
                Finding(
                    check=NAME,
                    status=Status.UNKNOWN,
                    code="CHECK_UNKNOWN",
                    message=f"could not read the node's Slurm features ({data.features_error}): "
                    f"not run: {', '.join(data.skipped_for_features)}",
                )  # fmt: skip
            )
        side: list[Finding] = []
        if data.nhc is not None:
            from slurm_hooks.detect.site.compare import compare

            side.append(compare(data.nhc, data.results, findings))
        failed = {f.values.get("site_check") for f in findings} - {None}
        passed = len(data.results) - len(failed)
        if passed or not (findings or side):
            what = (
                f"{passed} site check(s) passed"
                if data.results
                else "not applicable: no site check applies to this node"
            )
            findings.append(ok(NAME, what, passed=passed))
        return findings + side


def judge_one(
    c: SiteCheck, data: Any, error: BaseException | None, enforcing: bool
) -> list[Finding]:
    from slurm_hooks.detect.site.kinds import KINDS

    kind = KINDS[c.kind]
    comp = Component("site", name=c.name)
    base = {"site_check": c.name, "kind": c.kind}
    if error is not None:
        return [
            Finding(
                check=NAME,
                status=Status.UNKNOWN,
                code="CHECK_UNKNOWN",
                message=f"{c.name}: could not run: {type(error).__name__}: {error}",
                component=comp,
                values=base,
            )  # fmt: skip
        ]
    try:
        problems = kind.judge(c.args, data)
    except Exception as exc:  # noqa: BLE001 - a judge bug is UNKNOWN for this check only
        return judge_one(c, None, exc, enforcing)
    if not problems:
        return []
    fatal = c.fatal and enforcing
    # One printable line, whatever a check quotes: a site function's ``die``
    # text, a command's output, a file's lines can hold what a user wrote
    # (a process's arguments, a file name), escape sequences included.
    message = "; ".join(printable(p.message) for p in problems[:3])
    if len(problems) > 3:
        message += f" (+{len(problems) - 3} more)"
    return [
        Finding(
            check=NAME,
            status=Status.FAIL if fatal else Status.WARN,
            code=problems[0].code or kind.code,
            message=f"{c.name}: {message}",
            component=comp,
            action=c.action if fatal else Action.NONE,
            values={**base, **problems[0].values, "would_fail": c.fatal},
        )
    ]
