#!/usr/bin/env python3
"""One-shot GPU node check: burn-in, all-reduce (or copy bandwidth), as JSON.

Run on a real GPU node (``python bench/gpu_node_check.py``; ``--help`` for
options).  Stages run in child processes with hard timeouts, so a hung CUDA
call cannot hang the script: the whole run stays under ``--budget`` seconds
(default 170) and always prints one JSON document, with whatever stages
finished and an ``error`` for those that did not.

Stages:
  detect   GPUs through NVML (pynvml) and torch
  burnin   the torch burn-in engine (bf16 + fp32 matmuls on every GPU at once,
           checksums, float64 reference), judged with the repo's judge
  nccl     all_reduce_perf when installed, else torch.distributed (NCCL);
           skipped with one GPU (an all-reduce over one rank moves nothing)
  copy     device-to-device copy bandwidth per GPU (always, cheap)
  checks   the product's own GPU health checks (healthcheck, epilog, watch and
           acceptance-without-engines phases) on the real NVML, each check
           alone: its findings, its wall time and the NVML calls it made

On a machine without GPUs it prints ``"status": "no GPU"`` and exits 0.
Exit code: 0 when every finding is OK (or no GPU), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


# --- stages (run in a child: `gpu_node_check.py --stage NAME`) ---------------


def stage_detect(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        out["nvml"] = {
            "driver": str(pynvml.nvmlSystemGetDriverVersion()),
            "gpus": [
                {
                    "index": i,
                    "name": str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))),
                    "uuid": str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))),
                }
                for i in range(n)
            ],
        }
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - reported
        out["nvml_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import torch

        out["torch"] = {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "available": bool(torch.cuda.is_available()),
            "count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        }
    except Exception as exc:  # noqa: BLE001
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
    out["all_reduce_perf"] = find_all_reduce_perf()
    return out


def _profile_for(name: str | None) -> dict[str, Any]:
    if not name:
        return {}
    from slurm_hooks.detect.profiles import load_builtin

    for key, prof in (
        ("H200", "h200-sxm-141gb"),
        ("H100", "h100-sxm5-80gb"),
        ("A100", "a100-sxm4-80gb"),
    ):
        if key in name.upper():
            p = load_builtin(prof)
            return {"name": prof, **{k: p[k] for k in p if k not in ("name",)}}
    return {}


def stage_burnin(args: argparse.Namespace) -> dict[str, Any]:
    from slurm_hooks.detect.engines.burnin.judge import judge_burnin, thresholds_from
    from slurm_hooks.detect.engines.burnin.telemetry import default_nvml
    from slurm_hooks.detect.engines.burnin.torch_engine import TorchBurninConfig, run_torch_burnin

    cfg = TorchBurninConfig(duration_s=args.burn_s, size=args.size)
    t0 = time.monotonic()
    run = run_torch_burnin(cfg, nvml=default_nvml())
    name = run.gpus[0].name if run.gpus else None
    profile = _profile_for(name)
    if run.gpus and profile.get("gpu_count", 0) > len(run.gpus):
        # A machine with part of the SKU's GPUs (a cloud slice, a sandbox):
        # judge each GPU it has, not the baseboard's count.
        profile["gpu_count"] = len(run.gpus)
    findings = judge_burnin(run, thresholds_from(profile, {}))
    return {
        "seconds": round(time.monotonic() - t0, 2),
        "profile": profile.get("name"),
        "run": run.to_dict(),
        "findings": [f.to_dict() for f in findings],
    }


def stage_copy(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    out = []
    nbytes = args.copy_mib * 1024 * 1024
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        dst.copy_(src)
        torch.cuda.synchronize(dev)
        reps = 10
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            dst.copy_(src)
        end.record()
        end.synchronize()
        secs = start.elapsed_time(end) / 1000.0 / reps
        out.append(
            {
                "gpu": i,
                "bytes": nbytes,
                "copy_gbps": round(nbytes / secs / 1e9, 1),
                # read + write: what the memory actually moved
                "memory_traffic_gbps": round(2 * nbytes / secs / 1e9, 1),
            }
        )
        del src, dst
    return {"per_gpu": out}


def stage_nccl(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from slurm_hooks.detect.engines.nccl.judge import judge_nccl, thresholds_from

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if n else None
    profile = _profile_for(name)
    if n < 2:
        return {"skipped": f"{n} GPU: an all-reduce over one rank moves no data (busbw is 0)"}
    binary = find_all_reduce_perf()
    if binary:
        from slurm_hooks.detect.engines.nccl.engines import all_reduce_argv, run_all_reduce_perf

        argv = all_reduce_argv(
            binary,
            ngpus=n,
            min_bytes="32M",
            max_bytes=args.nccl_max,
            iters=10,
            warmup=3,
            timeout_s=int(args.nccl_timeout) - 5,
        )
        run = run_all_reduce_perf(argv, timeout=args.nccl_timeout - 2)
    else:
        from slurm_hooks.detect.engines.nccl.engines import (
            TorchNcclConfig,
            parse_size,
            run_torch_all_reduce,
        )

        cfg = TorchNcclConfig(
            max_bytes=parse_size(args.nccl_max), iters=10, warmup=3, timeout_s=args.nccl_timeout - 5
        )
        run = run_torch_all_reduce(cfg)
    findings = judge_nccl(run, thresholds_from(profile, {}))
    return {"engine": run.engine, "run": run.to_dict(), "findings": [f.to_dict() for f in findings]}


class _CountingNvml:
    """pynvml with every ``nvml*`` call counted (name -> calls, seconds)."""

    def __init__(self, real: Any):
        self._real = real
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr

        def counted(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return attr(*a, **k)
            finally:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

        return counted

    def reset(self) -> tuple[dict[str, int], float]:
        calls, secs = dict(self.calls), sum(self.seconds.values())
        self.calls.clear()
        self.seconds.clear()
        return calls, secs


def _check_config(tmp: Path, gpus: int, base: str | None, nvml: str = "counting") -> Path:
    """A config for this machine: its GPU count, no IB, the kernel log an
    empty file (a sandboxed GPU machine may have no /dev/kmsg)."""
    klog = tmp / "kern.log"
    klog.write_text("")
    lines = [
        "[general]",
        f'state_dir = "{tmp / "state"}"',
        "observe_only = true",
        "[checks]",
        f'nvml = "{nvml}"',
        "[checks.xid]",
        'source = "file"',
        f'path = "{klog}"',
        "[profiles.here]",
        'nodes = "gpu-node"',
    ]
    if base:
        lines.append(f'base = "{base}"')
    # This machine's RAM, not the SKU's 2 TB; no IB ports expected.
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines += [f"gpu_count = {gpus}", f"memory_gb = {mem_gb:.1f}", "[profiles.here.ib]", "count = 0"]
    path = tmp / f"config-{nvml}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def stage_checks(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    import pynvml

    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect import runner
    from slurm_hooks.detect.probes import nvml as nvml_probe

    counting = _CountingNvml(pynvml)
    nvml_probe.BACKENDS["counting"] = lambda scenario=None: counting
    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    name = str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))) if n else ""
    pynvml.nvmlShutdown()
    base = _profile_for(name).get("name")
    tmp = Path(tempfile.mkdtemp(prefix="gpu-node-checks-"))
    cfg = config_mod.load(str(_check_config(tmp, n, base)), validate=False)
    out: dict[str, Any] = {"gpus": n, "gpu_name": name, "profile_base": base, "phases": {}}
    for phase in ("healthcheck", "epilog", "watch"):
        rs = runner.setup(cfg, node="gpu-node")
        names = runner.plan(phase, rs.checks)
        per_check: dict[str, Any] = {}
        for check in names:
            counting.reset()
            res = runner.run_phase(phase, only=[check], run_setup=rs)
            calls, nvml_s = counting.reset()
            per_check[check] = {
                "ms": round(res.seconds * 1000, 2),
                "nvml_calls": sum(calls.values()),
                "nvml_ms": round(nvml_s * 1000, 2),
                "calls_by_function": calls,
                "findings": [
                    f"{f.status} {f.code} {f.component.short()}: {f.message}"[:300]
                    for f in res.findings
                ],
            }
        # The whole phase as a hook runs it (checks in parallel), three times.
        walls = []
        for _ in range(3):
            counting.reset()
            res = runner.run_phase(phase, run_setup=rs)
            walls.append(round(res.seconds * 1000, 2))
        calls, nvml_s = counting.reset()
        rs.close()
        out["phases"][phase] = {
            "checks": per_check,
            "phase_ms_runs": walls,
            "phase_nvml_calls": sum(calls.values()),
            "status": str(res.status),
            "problems": [f"{f.status} {f.code} {f.message}"[:300] for f in res.problems],
        }
    # A profile that leaves gpu_count unset: the GPU checks must still run
    # here (runner.no_gpu_reason: the PCI list, then the driver's paths).
    from slurm_hooks.detect.probes import pci

    bare = tmp / "config-noprofile.toml"
    text = (tmp / "config-counting.toml").read_text().split("[profiles.here]")[0]
    bare.write_text(text.replace('nvml = "counting"', 'nvml = "pynvml"'))
    res = runner.run_phase(
        "healthcheck", cfg=config_mod.load(str(bare), validate=False), node="gpu-node",
        only=["gpu_count", "gpu_lost"],
    )  # fmt: skip
    out["no_profile"] = {
        "pci_nvidia": pci.vendor_present(pci.NVIDIA_VENDOR),
        "driver_present": pci.driver_present(),
        "findings": [f"{f.status} {f.code}: {f.message}"[:200] for f in res.findings],
    }
    return out


def _median_ms(samples: list[float]) -> float:
    return round(sorted(samples)[len(samples) // 2] * 1000, 1)


def stage_startup(args: argparse.Namespace) -> dict[str, Any]:
    """Whole-process start-up on the real driver, interleaved rounds:
    ``python -c pass``, pynvml's import + nvmlInit, and the healthy
    healthcheck phase (``python -m slurm_hooks.detect.runner``)."""
    import tempfile

    import pynvml

    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    name = str(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))) if n else ""
    pynvml.nvmlShutdown()
    tmp = Path(tempfile.mkdtemp(prefix="gpu-node-startup-"))
    cfg = _check_config(tmp, n, _profile_for(name).get("name"), nvml="pynvml")
    env = {**os.environ, "SLURM_HOOKS_CONFIG": str(cfg), "SLURMD_NODENAME": "gpu-node"}
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import pynvml + nvmlInit": [
            sys.executable, "-c", "import pynvml; pynvml.nvmlInit(); pynvml.nvmlShutdown()"
        ],
        "healthcheck phase": [sys.executable, "-m", "slurm_hooks.detect.runner", "healthcheck"],
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in cmds}
    rcs: dict[str, int] = {}
    for _ in range(args.rounds):
        for key, argv in cmds.items():
            t0 = time.perf_counter()
            p = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=60)
            times[key].append(time.perf_counter() - t0)
            rcs[key] = p.returncode
    base = _median_ms(times["python -c pass"])
    return {
        "rounds": args.rounds,
        "median_ms": {k: _median_ms(v) for k, v in times.items()},
        "over_python_ms": {k: round(_median_ms(v) - base, 1) for k, v in times.items()},
        "min_max_ms": {
            k: [round(min(v) * 1000, 1), round(max(v) * 1000, 1)] for k, v in times.items()
        },
        "last_rc": rcs,
    }


STAGES = {
    "detect": stage_detect,
    "checks": stage_checks,
    "startup": stage_startup,
    "burnin": stage_burnin,
    "copy": stage_copy,
    "nccl": stage_nccl,
}


def find_all_reduce_perf() -> str | None:
    for cand in (
        shutil.which("all_reduce_perf"),
        "/opt/nccl-tests/build/all_reduce_perf",
        "/usr/local/bin/all_reduce_perf",
        str(ROOT / "nccl-tests/build/all_reduce_perf"),
    ):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


# --- driver ------------------------------------------------------------------


def run_stage(name: str, args: argparse.Namespace, timeout: float) -> dict[str, Any]:
    """Run one stage in a child with a hard timeout; always returns a dict."""
    if timeout < 5:
        return {"error": f"skipped: only {timeout:.0f}s of budget left"}
    argv = [sys.executable, __file__, "--stage", name, *args.passthrough]
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-800:]
        return {
            "error": f"timed out after {timeout:.0f}s (killed)",
            "stderr_tail": tail.decode(errors="replace") if isinstance(tail, bytes) else tail,
        }
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not last:
        return {
            "error": f"stage exited rc={p.returncode}",
            "stderr_tail": p.stderr[-1500:],
            "seconds": round(time.monotonic() - t0, 1),
        }
    try:
        return json.loads(last[-1])
    except json.JSONDecodeError as exc:
        return {"error": f"unreadable stage output: {exc}"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--stage", choices=sorted(STAGES), help=argparse.SUPPRESS)
    ap.add_argument("--budget", type=float, default=170.0, help="total seconds (default 170)")
    ap.add_argument("--burn-s", type=float, default=12.0, help="burn-in seconds (default 12)")
    ap.add_argument("--size", type=int, default=8192, help="matrix side (default 8192)")
    ap.add_argument("--copy-mib", type=int, default=1024, help="copy buffer MiB (default 1024)")
    ap.add_argument("--nccl-max", default="1G", help="largest all-reduce size (default 1G)")
    ap.add_argument(
        "--nccl-timeout", type=float, default=60.0, help="all-reduce seconds (default 60)"
    )
    ap.add_argument("--rounds", type=int, default=11, help="start-up rounds (default 11)")
    args = ap.parse_args(argv)
    args.passthrough = [
        f"--burn-s={args.burn_s}",
        f"--size={args.size}",
        f"--copy-mib={args.copy_mib}",
        f"--nccl-max={args.nccl_max}",
        f"--nccl-timeout={args.nccl_timeout}",
        f"--rounds={args.rounds}",
    ]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.stage:
        result = STAGES[args.stage](args)
        print(json.dumps(result))
        return 0
    t_end = time.monotonic() + args.budget
    report: dict[str, Any] = {
        "host": os.uname().nodename,
        "started": time.strftime("%FT%TZ", time.gmtime()),
    }

    def left() -> float:
        return t_end - time.monotonic()

    report["detect"] = run_stage("detect", args, min(60.0, left()))
    det = report["detect"]
    n_nvml = len(det.get("nvml", {}).get("gpus", []))
    n_torch = det.get("torch", {}).get("count", 0)
    if not n_nvml and not n_torch:
        report["status"] = "no GPU"
        report["why"] = {
            k: det.get(k) for k in ("nvml_error", "torch_error", "torch") if det.get(k)
        }
        print(json.dumps(report, indent=2))
        return 0
    if not n_torch:
        report["status"] = "GPU present but torch cannot use it"
        print(json.dumps(report, indent=2))
        return 1
    if n_nvml:
        report["checks"] = run_stage("checks", args, min(60.0, left() - 90))
        report["startup"] = run_stage("startup", args, min(60.0, left() - 90))
    report["burnin"] = run_stage("burnin", args, min(args.burn_s + 75.0, left() - 45))
    report["copy"] = run_stage("copy", args, min(30.0, left() - 35))
    report["nccl"] = run_stage("nccl", args, min(args.nccl_timeout + 20, left() - 2))
    findings = [f for st in ("burnin", "nccl") for f in report.get(st, {}).get("findings", [])]
    problems = [f for f in findings if f["status"] != "OK"]
    errors = [
        st
        for st in ("checks", "startup", "burnin", "copy", "nccl")
        if "error" in report.get(st, {})
    ]
    report["summary"] = {
        "seconds": round(args.budget - left(), 1),
        "findings": len(findings),
        "problems": [f"{f['status']} {f['code']} {f['message']}" for f in problems],
        "stage_errors": errors,
    }
    print(json.dumps(report, indent=2))
    return 1 if problems or errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
