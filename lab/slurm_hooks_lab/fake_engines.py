"""TEST DOUBLE: fake ``gpu_burn`` and ``all_reduce_perf`` for machines without GPUs.

It prints what the real tools print (same lines, same spacing, ``\\r``
progress updates, the same failure messages), computed from a scenario, so
the prolog on the lab runs the real parsers and judges on realistic text.
It never measures anything.

It plugs into the product by name: :func:`backend` is the ``lab:fake``
entry point of the ``slurm_hooks.engines`` group, chosen by ``engine =
"lab:fake"`` in ``[checks.burnin]``, ``[checks.nccl]`` or ``[preflight]``; the
product never picks it by itself.

Scenario sources, merged in this order (the checks hand over the configured
paths: ``[checks] nvml_scenario`` and ``[checks.burnin|nccl] scenario``):

* the fake NVML scenario: GPU count, names,
  UUIDs, temperatures; a GPU with ``lost`` set fails to initialise, one with
  ``hw_slowdown``/``hw_power_brake``/``sw_thermal`` throttling runs at 60%;
* its own small file (TOML or JSON)::

      [burnin]
      gflops = 51000             # every GPU (gpu_burn's FP32 Gflop/s)
      [burnin.gpu.3]
      gflops = 35000             # this one is slow
      errors = 12                # ... or miscomputes
      died = true                # ... or its worker dies mid-run
      init_error = "Error: CUDA_ERROR_UNKNOWN"
      [nccl]
      busbw_gbps = 480           # large-message bus bandwidth
      wrong = 0                  # wrong elements at the largest size
      fail = "nccl"              # "nccl", "cuda" or "hang" (no summary)

Run as ``python -m slurm_hooks_lab.fake_engines gpu_burn [-tc] [-d] 10`` or
``python -m slurm_hooks_lab.fake_engines all_reduce_perf -g 8 -b 32M -e 1G``
to stand in for the binaries (arguments read as the real tools read them;
there, and only there, the scenarios come from ``$SLURM_HOOKS_ENGINE_SCENARIO``
and ``$SLURM_HOOKS_NVML_SCENARIO``).
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from slurm_hooks.agent.preflight import Measurement, busbw_of
from slurm_hooks.core.errors import ConfigError

if TYPE_CHECKING:
    from slurm_hooks.detect.engines.burnin.model import BurninRun
    from slurm_hooks.detect.engines.nccl.model import NcclRun
    from slurm_hooks.detect.engines.registry import EngineRequest

ENV_ENGINE_SCENARIO = "SLURM_HOOKS_ENGINE_SCENARIO"
ENV_NVML_SCENARIO = "SLURM_HOOKS_NVML_SCENARIO"
OPS_PER_MUL = 17188257792  # gpu_burn's constant: flops per 2048^2 SGEMM
_SLOW_REASONS = {"hw_slowdown", "hw_power_brake", "sw_thermal", "hw_thermal"}


@dataclass(frozen=True)
class FakeGpu:
    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    gflops: float = 51000.0
    errors: int = 0
    died: bool = False
    init_error: str | None = None
    temp_c: int = 45
    pci: str = "0x18"


@dataclass(frozen=True)
class EngineScenario:
    gpus: tuple[FakeGpu, ...] = ()
    busbw_gbps: float = 480.0
    wrong: int = 0
    fail: str | None = None
    host: str = "node001"
    extra: Mapping[str, Any] = field(default_factory=dict)


def _read(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        raw = fh.read()
    data = json.loads(raw) if path.endswith(".json") else tomllib.loads(raw.decode())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a table")
    return data


def load_scenario(
    engine_path: str | None = None,
    nvml_path: str | None = None,
    *,
    gpu_count: int = 8,
    devices: Sequence[int] | None = None,
) -> EngineScenario:
    """Build the scenario from the two files (either may be absent).  With
    ``devices`` the node's other GPUs are not there, and those are numbered
    0..k-1 in that order: what CUDA shows a process started with
    ``CUDA_VISIBLE_DEVICES`` (a lost GPU outside them fails nothing)."""
    data = _read(engine_path) if engine_path else {}
    nvml_gpus: list[dict[str, Any]] = []
    if nvml_path:
        from slurm_hooks_lab.fake_nvml import read_scenario  # noqa: PLC0415

        nvml_gpus = list(read_scenario(nvml_path).gpus)
    burnin = data.get("burnin", {})
    per_gpu = burnin.get("gpu", {})
    count = len(nvml_gpus) if nvml_path else int(burnin.get("gpu_count", gpu_count))
    if devices and not nvml_path:
        count = max(count, max(devices) + 1)
    gpus = []
    for i in range(count):
        nv = nvml_gpus[i] if i < len(nvml_gpus) else {}
        over = per_gpu.get(str(i), {})
        gflops = float(over.get("gflops", burnin.get("gflops", 51000.0)))
        throttle = set(nv.get("throttle", []) or [])
        if throttle & _SLOW_REASONS and "gflops" not in over:
            gflops *= 0.6
        init_error = over.get("init_error")
        if nv.get("lost") and not init_error:
            init_error = "Error: CUDA_ERROR_UNKNOWN"
        bus = str(nv.get("pci_bus_id", f"00000000:{0x18 + 0x10 * i:02X}:00.0"))
        gpus.append(
            FakeGpu(
                index=i,
                name=str(nv.get("name", burnin.get("name", "NVIDIA H100 80GB HBM3"))),
                uuid=str(nv.get("uuid", f"GPU-{i:08x}-0000-0000-0000-000000000000")),
                gflops=gflops,
                errors=int(over.get("errors", 0)),
                died=bool(over.get("died", False)),
                init_error=init_error,
                temp_c=int(over.get("temp_c", nv.get("temperature", 45) + 20)),
                pci=f"0x{bus.split(':')[1].lower()}" if ":" in bus else "0x18",
            )
        )
    if devices is not None:
        gpus = [replace(gpus[d], index=i) for i, d in enumerate(devices) if d < len(gpus)]
    nccl = data.get("nccl", {})
    fail = nccl.get("fail")
    if fail is None and any(g.init_error for g in gpus):
        fail = "cuda"
    return EngineScenario(
        gpus=tuple(gpus),
        busbw_gbps=float(nccl.get("busbw_gbps", 480.0)),
        wrong=int(nccl.get("wrong", 0)),
        fail=fail,
        host=str(nccl.get("host", os.uname().nodename.split(".")[0])),
        extra=data,
    )


def gpu_burn_output(
    sc: EngineScenario, duration_s: int = 10, *, doubles: bool = False, tensor: bool = False
) -> str:
    """gpu_burn's stdout+stderr for the scenario (newer version's wording)."""
    out: list[str] = []
    out.append("Using compare file: compare.ptx")
    out.append(f"Burning for {duration_s} seconds.")
    for g in sc.gpus:
        out.append(f"GPU {g.index}: {g.name} (UUID: {g.uuid})")
    live = [g for g in sc.gpus if not g.init_error]
    for g in sc.gpus:
        if g.init_error:
            out.append(f"Couldn't init a GPU test: {g.init_error}")
    kind = "using DOUBLES" if doubles else "using FLOATS"
    for g in live:
        out.append(
            f"Initialized device {g.index} with 81090 MB of memory (80562 MB available,"
            f" using 72506 MB of it), {kind}{', using Tensor Cores' if tensor else ''}"
        )
        out.append("Results are 16777216 bytes each, thus performing 4529 iterations")
    steps = max(1, min(10, duration_s))
    procs = {g.index: 0 for g in sc.gpus}
    window_errs = {g.index: 0 for g in sc.gpus}
    dead: set[int] = set()
    text = ""
    for step in range(1, steps + 1):
        pct = 100.0 * step / steps
        parts_p, parts_e, parts_t = [], [], []
        for g in sc.gpus:
            if g.died and step > steps // 2:
                dead.add(g.index)
            if g.init_error:
                parts_p.append("0 (0 Gflop/s) ")
            elif g.index in dead:
                parts_p.append("-1 (0 Gflop/s) ")
            else:
                per_step = g.gflops * 1e9 * duration_s / steps / OPS_PER_MUL
                procs[g.index] += max(1, int(per_step))
                parts_p.append(f"{procs[g.index]} ({g.gflops:.0f} Gflop/s) ")
            if g.index in dead:
                parts_e.append(f"{window_errs[g.index]}  (DIED!)")
            else:
                if g.errors and step >= steps // 2:
                    window_errs[g.index] += max(1, g.errors // max(1, steps - steps // 2 + 1))
                e = window_errs[g.index]
                parts_e.append(f"{e}  (WARNING!)" if e else "0 ")
            parts_t.append(f"{g.temp_c} C ")
        text += (
            f"\r{pct:.1f}%  proc'd: "
            + "- ".join(parts_p)
            + "  errors: "
            + "- ".join(parts_e)
            + "  temps: "
            + "- ".join(parts_t)
        )
        if len(dead) == len(sc.gpus) and sc.gpus:
            out.append(text.lstrip("\r"))
            out.append("")
            out.append("No clients are alive!  Aborting")
            return "\n".join(out) + "\n"
        if step % 3 == 0 and step != steps:
            text += "\n\tSummary at:   Mon Jun  2 10:00:00 UTC 2025\n\n"
            for k in window_errs:
                window_errs[k] = 0
    out.append(text.lstrip("\r"))
    out.append("Killing processes with SIGTERM (soft kill)")
    for g in live:
        out.append(f"Freed memory for dev {g.index}")
        out.append("Uninitted cublas")
    out.append("done")
    out.append("")
    out.append(f"Tested {len(sc.gpus)} GPUs:")
    faulty = {g.index for g in sc.gpus if g.errors}
    for g in sc.gpus:
        out.append(f"\tGPU {g.index}: {'FAULTY' if g.index in faulty else 'OK'}")
    return "\n".join(out) + "\n"


def _sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= max(2, factor)
    return out


def all_reduce_perf_output(
    sc: EngineScenario,
    *,
    ngpus: int | None = None,
    min_bytes: int = 32 * 1024**2,
    max_bytes: int = 1024**3,
    factor: int = 2,
    check: int = 1,
) -> str:
    """all_reduce_perf's output for the scenario (nccl-tests 2.13+ format)."""
    n = ngpus if ngpus is not None else len(sc.gpus)
    gpus = list(sc.gpus[:n])
    lines = [
        f"# nThread 1 nGpus {n} minBytes {min_bytes} maxBytes {max_bytes} step: {factor}(factor)"
        f" warmup iters: 5 iters: 20 agg iters: 1 validation: {check} graph: 0",
        "#",
        "# Using devices",
    ]
    for g in gpus:
        lines.append(
            f"#  Rank {g.index:2d} Group  0 Pid  41177 on {sc.host:>10s} device {g.index:2d}"
            f" [{g.pci}] {g.name}"
        )
    if sc.fail in ("nccl", "cuda"):
        if sc.fail == "cuda":
            lines.append(f"{sc.host}: Test CUDA failure common.cu:1038 'unknown error'")
        else:
            lines.append(
                f"{sc.host}:41177:41177 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)"
            )
            lines.append(
                f"{sc.host}:41177:41195 [3] transport/nvls.cc:158 NCCL WARN Cuda failure 'invalid"
                " argument'"
            )
            lines.append(
                f"{sc.host}: Test NCCL failure common.cu:1005 'unhandled cuda error (run with"
                " NCCL_DEBUG=INFO for details) / Cuda failure 'invalid argument''"
            )
        lines.append(f" .. {sc.host} pid 41177: Test failure common.cu:891")
        return "\n".join(lines) + "\n"
    lines += [
        "#",
        "#                                                              out-of-place"
        "                       in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)       ",
    ]
    bus_factor = 2.0 * (n - 1) / n if n > 1 else 0.0
    sizes = _sizes(min_bytes, max_bytes, factor)
    total_bw = 0.0
    for k, size in enumerate(sizes):
        if sc.fail == "hang" and k == len(sizes) // 2:
            return "\n".join(lines) + "\n"
        # Bandwidth ramps up with size: half of peak around 16 MB.
        busbw = sc.busbw_gbps * size / (size + 16 * 1024**2) * (1.0 + 0.02 * (k % 2))
        busbw = min(busbw, sc.busbw_gbps * 1.01)
        algbw = busbw / bus_factor if bus_factor else 2 * sc.busbw_gbps
        time_us = size / (algbw * 1e3)
        if n <= 1:
            busbw = 0.0
        wrong = sc.wrong if size == sizes[-1] else 0
        wr = "N/A" if not check else str(wrong)

        def col(t: float, a: float, b: float, w: str) -> str:
            ts = f"{t:7.0f}" if t >= 10000 else (f"{t:7.1f}" if t >= 100 else f"{t:7.2f}")
            return f"  {ts}  {a:6.2f}  {b:6.2f}  {w:>5s}"

        lines.append(
            f"{size:12d}  {size // 4:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}"
            + col(time_us, algbw, busbw, wr)
            + col(time_us * 0.99, algbw * 1.01, busbw * 1.01, wr)
        )
        total_bw += busbw * 1.005
    oob = 1 if sc.wrong and check else 0
    lines.append(f"# Out of bounds values : {oob} {'FAILED' if oob else 'OK'}")
    lines.append(f"# Avg bus bandwidth    : {total_bw / len(sizes):g} ")
    lines.append("#")
    lines.append("")
    return "\n".join(lines) + "\n"


def _size_arg(text: str) -> int:
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    t = text.strip()
    if t and t[-1].upper() in units:
        return int(float(t[:-1]) * units[t[-1].upper()])
    return int(t)


def visible_devices(value: str | None) -> tuple[int, ...] | None:
    """``CUDA_VISIBLE_DEVICES`` as indices; None (every GPU) when unset.
    CUDA stops at the first entry that is not a valid index, so do we."""
    if value is None:
        return None
    out: list[int] = []
    for part in value.split(","):
        if not part.strip().isdigit():
            break
        out.append(int(part))
    return tuple(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("gpu_burn", "all_reduce_perf"):
        print(
            "usage: python -m slurm_hooks_lab.fake_engines gpu_burn|all_reduce_perf [ARGS]",
            file=sys.stderr,
        )
        return 2
    tool, rest = args[0], args[1:]
    sc = load_scenario(
        os.environ.get(ENV_ENGINE_SCENARIO),
        os.environ.get(ENV_NVML_SCENARIO),
        devices=visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES")),
    )
    if tool == "gpu_burn":
        positional = [a for a in rest if not a.startswith("-")]
        duration = int(positional[-1]) if positional else 10
        sys.stdout.write(gpu_burn_output(sc, duration, doubles="-d" in rest, tensor="-tc" in rest))
        return 0
    opts = {rest[i]: rest[i + 1] for i in range(0, len(rest) - 1) if rest[i].startswith("-")}
    text = all_reduce_perf_output(
        sc,
        ngpus=int(opts.get("-g", len(sc.gpus))),
        min_bytes=_size_arg(opts.get("-b", "32M")),
        max_bytes=_size_arg(opts.get("-e", "1G")),
        factor=int(opts.get("-f", "2")),
        check=int(opts.get("-c", "1")),
    )
    sys.stdout.write(text)
    failed = sc.fail is not None or (sc.wrong and int(opts.get("-c", "1")))
    return 1 if failed else 0


@dataclass
class FakeNcclEngine:
    """TEST DOUBLE: what ``all_reduce_perf`` across ``nodes`` would print, from
    each node's engine scenario: ``[internode] busbw_gbps`` (its network
    link; default ``[nccl] busbw_gbps``, the intra-node figure) and
    ``[nccl] fail``.  A set of nodes runs at its slowest member's speed.
    Parsed by the real parser."""

    template: str
    gpus_per_node: int = 1
    min_bytes: int = 256 * 1024**2
    max_bytes: int = 1024**3
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def _scenario(self, node: str) -> Any:
        path = self.template.replace("{node}", node)
        return load_scenario(path if os.path.exists(path) else None, gpu_count=self.gpus_per_node)

    def measure(self, nodes: Sequence[str]) -> Measurement:
        self.calls.append(tuple(nodes))
        scs = [self._scenario(n) for n in nodes]
        scs = [
            replace(
                s, busbw_gbps=float(s.extra.get("internode", {}).get("busbw_gbps", s.busbw_gbps))
            )
            for s in scs
        ]
        worst = min(scs, key=lambda s: s.busbw_gbps)
        fail = next((s.fail for s in scs if s.fail), None)
        gpus = tuple(
            FakeGpu(index=i, pci=f"0x{0x18 + 0x10 * (i % self.gpus_per_node):02x}")
            for i in range(len(nodes) * self.gpus_per_node)
        )
        sc = replace(worst, gpus=gpus, fail=fail, wrong=0, host=nodes[0])
        text = all_reduce_perf_output(sc, min_bytes=self.min_bytes, max_bytes=self.max_bytes)
        bw, err = busbw_of(text, "fake")
        return Measurement(tuple(nodes), bw, err)


class FakeEngines:
    """The ``lab:fake`` engine backend (see :mod:`slurm_hooks.detect.engines.registry`):
    real gpu_burn / all_reduce_perf text from the scenarios, parsed by the
    product's own parsers."""

    def burnin(self, req: EngineRequest, duration_s: int) -> BurninRun:
        from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn

        sc = load_scenario(
            req.scenario, req.nvml_scenario, gpu_count=req.gpu_count, devices=req.devices
        )
        run = parse_gpu_burn(gpu_burn_output(sc, int(duration_s)))
        if not req.devices:
            return run
        # Reported by the node's own index, as the registry asks of an engine.
        gpus = tuple(replace(g, index=req.devices[g.index]) for g in run.gpus)
        return replace(run, gpus=gpus)

    def all_reduce(self, req: EngineRequest, min_bytes: int, max_bytes: int) -> NcclRun:
        from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests

        sc = load_scenario(
            req.scenario, req.nvml_scenario, gpu_count=req.gpu_count, devices=req.devices
        )
        text = all_reduce_perf_output(sc, min_bytes=min_bytes, max_bytes=max_bytes)
        return parse_nccl_tests(text, engine="fake")

    def preflight(
        self, scenario: str, *, gpus_per_node: int, min_bytes: int, max_bytes: int
    ) -> FakeNcclEngine:
        if not scenario:
            raise ConfigError(
                "the lab:fake engine needs a per-node scenario template", key="preflight.scenario"
            )
        return FakeNcclEngine(
            scenario, gpus_per_node=gpus_per_node, min_bytes=min_bytes, max_bytes=max_bytes
        )


def backend() -> FakeEngines:
    """Entry point ``lab:fake`` of ``slurm_hooks.engines``."""
    return FakeEngines()


if __name__ == "__main__":
    raise SystemExit(main())
