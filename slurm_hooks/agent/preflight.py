"""Multi-node preflight: one all-reduce across the allocation, and when it is
slow, pairs that find the one node to blame.

``srun slurm-hooks preflight`` (or plain ``slurm-hooks preflight`` in a batch
script) at the start of a job measures an all-reduce across every node of
the allocation.  A whole-allocation figure cannot say which node is slow,
so when it is below the floor:

1. round 1 pairs the nodes disjointly (n1-n2, n3-n4, ...); a fast pair
   proves both its nodes good, a slow pair makes both suspects;
2. round 2 pairs every suspect with a distinct known-good node: a suspect
   that is slow next to a good node is the culprit; one that is fast there
   was only slow next to the culprit.

Only culprits are reported and drained.  When no pair is fast there is no
known-good node to compare with (the fabric, a switch, or every node): no
node is blamed and the run says so.

The pairing logic is pure (:func:`plan_pairs`, :func:`suspects`,
:func:`culprits`); measuring goes through a pluggable engine:
:class:`SrunNcclEngine` runs nccl-tests' ``all_reduce_perf`` across the
nodes with ``srun`` (MPI build of nccl-tests); any other ``engine`` is a
plug-in of the ``slurm_hooks.engines`` group (``detect.engines.registry``),
such as the lab's ``lab:fake``, which prints the same output from per-node
scenario files.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurm_hooks.core.bounds import require_positive
from slurm_hooks.core.model import Action, Component, Finding, Status

log = logging.getLogger(__name__)

Pair = tuple[str, str]
CHECK = "preflight"
CODE = "NCCL_INTERNODE_SLOW"
#: Rounds of pairs after a slow whole-allocation result: disjoint pairs,
#: then (if no pair was fast) new pairs, then suspects next to good nodes.
ROUNDS = 3


def pair(a: str, b: str) -> Pair:
    """A pair in canonical (sorted) order, so results key on it either way."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class PreflightConfig:
    """``[preflight]``."""

    #: Bus bandwidth (GB/s) below which a multi-node all-reduce is slow.
    busbw_floor_gbps: float = 40.0
    #: auto or nccl-tests (over srun), or the name of a plug-in engine
    #: (entry-point group ``slurm_hooks.engines``, e.g. the lab's "lab:fake").
    engine: str = "auto"
    #: nccl-tests' all_reduce_perf (an MPI build), started by srun on every
    #: node: a name on the nodes' PATH, or an absolute path.
    all_reduce_perf: str = "all_reduce_perf"
    #: Smallest message of the sweep (``-b``; K/M/G are powers of 1024).
    min_bytes: str = "256M"
    #: Largest message (``-e``); sizes double from min_bytes.  The median bus
    #: bandwidth of the largest size's rows is compared with the floor.
    max_bytes: str = "1G"
    #: Timed iterations per message size (``-n``).
    iters: int = 20
    #: GPUs (ranks) per node; 0 means the profile's gpu_count (else 1).
    gpus_per_node: int = 0
    #: srun's MPI plug-in for all_reduce_perf: auto (pmix where this
    #: Slurm has it, else pmi2, else the cluster's MpiDefault; Debian's
    #: 26.05 ships no mpi_pmix), none (MpiDefault), or a plug-in's name
    #: (pmix, pmix_v4, pmi2, ...).
    mpi: str = "auto"
    #: Extra srun arguments, after the MPI choice (e.g. ["--cpu-bind=none"]).
    srun_args: tuple[str, ...] = ()
    #: Seconds one measurement may take.
    timeout_s: float = 120.0
    #: Drain the culprits (else only report them).
    drain: bool = True
    #: Plug-in engine only: per-node scenario file, ``{node}`` replaced by the name.
    scenario: str = ""

    def validate(self) -> None:
        require_positive(self, "busbw_floor_gbps", "timeout_s")
        if not self.engine:
            raise ValueError("engine must be auto, nccl-tests or a plug-in's name")
        if self.engine not in ("auto", "nccl-tests"):
            from slurm_hooks.detect.engines.registry import check_name

            check_name(self.engine, ("auto", "nccl-tests"), key="preflight.engine")
        if not _MPI_NAME.fullmatch(self.mpi):
            raise ValueError("mpi must be auto, none or an MPI plug-in's name (letters, digits, _)")


_MPI_NAME = re.compile(r"[A-Za-z0-9_]{1,32}")
#: Preference of ``mpi = "auto"`` among what ``srun --mpi=list`` offers.
_MPI_PREFERENCE = ("pmix", "pmi2")


def mpi_plugins(listing: str) -> set[str]:
    """The plug-in names in ``srun --mpi=list``'s output: one per line after
    "MPI plugin types are...", plus the "specific pmix plugin versions
    available: pmix_v4,..." line.  Other text (errors, banners) is ignored."""
    out: set[str] = set()
    for line in listing.splitlines():
        line = line.strip()
        if ":" in line and "versions" in line:
            line = line.split(":", 1)[1]
        for word in re.split(r"[\s,]+", line):
            if re.fullmatch(r"(none|pmi2|pmix(_v\d+)?|cray_shasta)", word):
                out.add(word)
    return out


def choose_mpi(setting: str, available: set[str] | None) -> list[str]:
    """srun's ``--mpi`` argument for ``setting``; for ``auto``, from the
    plug-ins this Slurm has (``available``; None: could not ask, so leave it
    to MpiDefault rather than name a plug-in that may be missing)."""
    if setting == "none":
        return []
    if setting != "auto":
        return [f"--mpi={setting}"]
    for name in _MPI_PREFERENCE:
        if available and name in available:
            return [f"--mpi={name}"]
    return []


# -- pure: pairs and blame -----------------------------------------------------------


def plan_pairs(nodes: Sequence[str], results: Mapping[Pair, bool] | None = None) -> list[Pair]:
    """The next pairs to measure.  ``results`` maps measured pairs to "slow".

    No results: disjoint pairs in allocation order; an odd node out is
    paired with the first node.  With results: each suspect not yet measured
    next to a known-good node gets one, spread round-robin over the good
    nodes.  Empty when nothing is left to learn (or nothing can be: no good node).
    """
    order = list(dict.fromkeys(nodes))
    if len(order) < 2:
        return []
    if not results:
        first = [pair(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
        if len(order) % 2:
            first.append(pair(order[-1], order[0]))
        return first
    good = known_good(results)
    good_list = [n for n in order if n in good]
    out: list[Pair] = []
    if not good_list:
        used: set[str] = set()
        for a in order:
            if a in used:
                continue
            for b in order:
                if b != a and b not in used and pair(a, b) not in results:
                    out.append(pair(a, b))
                    used.update((a, b))
                    break
        return out
    k = 0
    for s in (n for n in order if n in suspects(results)):
        if any(p in results for p in (pair(s, g) for g in good_list)):
            continue  # already measured next to a good node
        out.append(pair(s, good_list[k % len(good_list)]))
        k += 1
    return out


def known_good(results: Mapping[Pair, bool]) -> set[str]:
    """Nodes in at least one fast pair."""
    return {n for p, slow in results.items() if not slow for n in p}


def suspects(results: Mapping[Pair, bool]) -> set[str]:
    """Nodes only ever seen in slow pairs."""
    good = known_good(results)
    return {n for p, slow in results.items() if slow for n in p} - good


def culprits(pair_results: Mapping[Pair, bool]) -> set[str]:
    """Suspects that were slow next to a known-good node: the nodes to blame."""
    good = known_good(pair_results)
    out = set()
    for (a, b), slow in pair_results.items():
        if not slow:
            continue
        if a in good and b not in good:
            out.add(b)
        elif b in good and a not in good:
            out.add(a)
    return out


# -- measuring ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    nodes: tuple[str, ...]
    busbw_gbps: float | None
    error: str | None = None
    seconds: float = 0.0

    def slow(self, floor: float) -> bool:
        """Below the floor, or failed to measure (a hang or an NCCL error
        across nodes is as bad as slow)."""
        return self.busbw_gbps is None or self.busbw_gbps < floor


class Engine(Protocol):
    def measure(self, nodes: Sequence[str]) -> Measurement: ...


def busbw_of(text: str, engine: str) -> tuple[float | None, str | None]:
    """(large-message bus bandwidth, None) of an ``all_reduce_perf`` output,
    or (None, why) when it failed or did not finish."""
    from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests

    run = parse_nccl_tests(text, engine=engine)
    if run.errors:
        return None, run.errors[0]
    bw = run.large_busbw()
    if bw is None:
        bw = run.avg_busbw
    if bw is None or not run.completed:
        return None, "no complete all_reduce_perf result"
    return bw, None


@dataclass
class SrunNcclEngine:
    """nccl-tests' ``all_reduce_perf`` (MPI build) across ``nodes`` with srun,
    one rank per GPU, inside the current allocation."""

    cfg: PreflightConfig
    gpus_per_node: int = 1
    run: Callable[..., Any] | None = None
    _mpi: set[str] | None = field(default=None, init=False, repr=False)

    def argv(self, nodes: Sequence[str]) -> list[str]:
        from slurm_hooks.core import hostlist

        g = max(1, self.gpus_per_node)
        return [
            "srun", "--overlap", f"--nodes={len(nodes)}", f"--nodelist={hostlist.fold(nodes)}",
            f"--ntasks-per-node={g}", "--gpus-per-task=1",
            *choose_mpi(self.cfg.mpi, self._available_mpi()),
            *self.cfg.srun_args,
            self.cfg.all_reduce_perf,
            "-b", self.cfg.min_bytes, "-e", self.cfg.max_bytes, "-f", "2",
            "-g", "1", "-n", str(self.cfg.iters), "-c", "1",
            "-T", str(max(5, int(self.cfg.timeout_s) - 5)),
        ]  # fmt: skip

    def _available_mpi(self) -> set[str] | None:
        """What ``srun --mpi=list`` offers, asked once per engine (only for
        ``mpi = "auto"``); None when srun could not say."""
        if self.cfg.mpi != "auto":
            return None
        if self._mpi is None:
            from slurm_hooks.core.errors import CommandError
            from slurm_hooks.detect.probes import commands

            run = self.run or commands.run
            try:
                res = run(["srun", "--mpi=list"], timeout=15, check=False)
                self._mpi = mpi_plugins((res.stdout or "") + (res.stderr or ""))
            except CommandError:
                self._mpi = set()
        return self._mpi or None

    def measure(self, nodes: Sequence[str]) -> Measurement:
        import time

        from slurm_hooks.core.errors import CommandError
        from slurm_hooks.detect.probes import commands

        run = self.run or commands.run
        t0 = time.monotonic()
        try:
            res = run(self.argv(nodes), timeout=self.cfg.timeout_s, check=False)
        except CommandError as exc:
            return Measurement(tuple(nodes), None, str(exc), time.monotonic() - t0)
        bw, err = busbw_of((res.stdout or "") + (res.stderr or ""), "nccl-tests")
        if err is None and res.rc != 0:
            err = f"all_reduce_perf exited {res.rc}"
            bw = None
        return Measurement(tuple(nodes), bw, err, time.monotonic() - t0)


# -- the run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightResult:
    nodes: tuple[str, ...]
    whole: Measurement | None
    pairs: tuple[tuple[Pair, Measurement], ...] = ()
    culprits: tuple[str, ...] = ()
    suspects: tuple[str, ...] = ()
    drained: tuple[str, ...] = ()
    floor_gbps: float = 0.0
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.whole is None or not self.whole.slow(self.floor_gbps)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        def m(x: Measurement | None) -> dict[str, Any] | None:
            if x is None:
                return None
            return {"nodes": list(x.nodes), "busbw_gbps": x.busbw_gbps, "error": x.error}

        return {
            "nodes": list(self.nodes),
            "ok": self.ok,
            "floor_gbps": self.floor_gbps,
            "whole": m(self.whole),
            "pairs": [m(x) for _, x in self.pairs],
            "culprits": list(self.culprits),
            "suspects": list(self.suspects),
            "drained": list(self.drained),
            "why": self.why,
        }


def culprit_finding(node: str, evidence: Iterable[Measurement], floor: float) -> Finding:
    """The finding the engine drains a culprit with."""
    worst = min((m.busbw_gbps or 0.0) for m in evidence) if evidence else 0.0
    return Finding(
        check=CHECK,
        status=Status.FAIL,
        code=CODE,
        message=(
            f"multi-node all-reduce {worst:.1f} GB/s below {floor:g} GB/s whenever {node} "
            "takes part, fine without it"
        ),
        component=Component("node"),
        action=Action.DRAIN,
        values={"busbw_gbps": worst, "floor_gbps": floor},
    )


def run_preflight(
    nodes: Sequence[str],
    engine: Engine,
    cfg: PreflightConfig,
    *,
    drain: Callable[[str, Finding], bool] | None = None,
) -> PreflightResult:
    """Measure the allocation; on a slow result, bisect by pairs and hand
    each culprit to ``drain`` (returns True when drained)."""
    order = tuple(dict.fromkeys(nodes))
    floor = cfg.busbw_floor_gbps
    if len(order) < 2:
        return PreflightResult(order, None, floor_gbps=floor, why="single node: nothing to test")
    whole = engine.measure(order)
    log.info("preflight nodes=%d busbw=%s error=%s", len(order), whole.busbw_gbps, whole.error)
    if not whole.slow(floor):
        return PreflightResult(order, whole, floor_gbps=floor, why="allocation is fast")
    results: dict[Pair, bool] = {}
    measured: list[tuple[Pair, Measurement]] = []
    for _round in range(ROUNDS):
        todo = [p for p in plan_pairs(order, results) if p not in results]
        for p in todo:
            mm = engine.measure(p)
            results[p] = mm.slow(floor)
            measured.append((p, mm))
        if not todo:
            break
    blamed = sorted(culprits(results), key=order.index)
    left = sorted(suspects(results) - set(blamed), key=order.index)
    if len(order) == 2 and not blamed:
        why = "two nodes, slow together: no third node to tell which one"
    elif not known_good(results):
        why = "every pair is slow: no known-good node, the fabric may be at fault; nobody blamed"
    elif blamed:
        why = f"slow whenever {', '.join(blamed)} takes part"
    else:
        why = "slow as a whole, every pair fast: nobody blamed"
    drained: list[str] = []
    if blamed and cfg.drain and drain is not None:
        for n in blamed:
            evidence = [mm for p, mm in measured if n in p and results[p]]
            if drain(n, culprit_finding(n, evidence, floor)):
                drained.append(n)
    return PreflightResult(
        order, whole, tuple(measured), tuple(blamed), tuple(left), tuple(drained), floor, why
    )


def make_engine(cfg: PreflightConfig, gpus_per_node: int = 1) -> Engine:
    """The configured engine: nccl-tests over srun for ``auto`` and
    ``nccl-tests`` (never a fake by itself), else the plug-in of that name."""
    if cfg.engine in ("auto", "nccl-tests"):
        return SrunNcclEngine(cfg, gpus_per_node=gpus_per_node)
    from slurm_hooks.detect.engines.nccl.engines import parse_size
    from slurm_hooks.detect.engines.registry import backend

    plugin = backend(cfg.engine, key="preflight.engine")
    engine: Engine = plugin.preflight(
        cfg.scenario,
        gpus_per_node=gpus_per_node,
        min_bytes=parse_size(cfg.min_bytes),
        max_bytes=parse_size(cfg.max_bytes),
    )
    return engine


def allocation_nodes(env: Mapping[str, str]) -> list[str]:
    """The job's nodes from ``SLURM_JOB_NODELIST`` (``SLURM_NODELIST``)."""
    from slurm_hooks.core import hostlist

    spec = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    return hostlist.expand(spec) if spec else []


__all__ = [
    "Measurement",
    "PreflightConfig",
    "PreflightResult",
    "SrunNcclEngine",
    "culprits",
    "known_good",
    "plan_pairs",
    "run_preflight",
    "suspects",
]
