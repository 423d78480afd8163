"""XID scan throughput and incremental cost.  Prints figures; asserts nothing.

    .venv/bin/python bench/bench_xid_scan.py [--mb 200]

1. Full scan of a generated kernel log (~0.1 % XID lines) against
   ``grep -E 'NVRM: Xid'`` on the same file in the same run (goal: <= 2x grep).
2. An incremental scan with nothing new (goal: < 5 ms beyond interpreter
   start-up), in-process and as a fresh interpreter.
3. Which heavy modules the scan path imports (must be none of click/requests).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

NOISE = [
    "[{t:12.6f}] mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link ACTIVE",
    "[{t:12.6f}] EXT4-fs (md127p3): re-mounted 0f3cd65a-338b-4574-bba3-ecef214e1917 r/w. Quota mode: none.",
    "[{t:12.6f}] workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, consider switching to WQ_UNBOUND",
    '[{t:12.6f}] audit: type=1400 audit({t:.3f}:{n}): apparmor="DENIED" operation="open" profile="snap" name="/proc/{n}/mounts"',
    "[{t:12.6f}] NVRM: GPU at PCI:0000:3b:00: GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d",
    "[{t:12.6f}] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "[{t:12.6f}] slurmstepd[{n}]: task/cgroup: _memcg_initialize: job: alloc=1024000MB mem.limit=1024000MB memsw.limit=unlimited",
]
XIDS = [
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 13, pid={n}, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 31, pid={n}, name=python3, channel 0x0000000c, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 95, pid='<unknown>', name=<unknown>, Uncontained: FBHUB. RST: Yes, D-RST: No",
    "[{t:12.6f}] NVRM: Xid (PCI:0000:{b:02x}:00): 79, pid={n}, name=python3, GPU has fallen off the bus.",
]


def generate(path: str, mb: int, xid_ratio: float = 0.001) -> tuple[int, int]:
    rng = random.Random(1)
    target = mb * 1024 * 1024
    written = lines = xids = 0
    t = 100.0
    with open(path, "w", encoding="ascii") as f:
        while written < target:
            block = []
            for _ in range(20_000):
                t += rng.random() / 100
                n = rng.randrange(1000, 99999)
                if rng.random() < xid_ratio:
                    block.append(
                        rng.choice(XIDS).format(t=t, n=n, b=rng.choice((0x18, 0x3B, 0x86, 0xAF)))
                    )
                    xids += 1
                else:
                    block.append(rng.choice(NOISE).format(t=t, n=n))
            text = "\n".join(block) + "\n"
            f.write(text)
            written += len(text)
            lines += len(block)
    return lines, xids


def best_of(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    args = ap.parse_args()
    from slurm_hooks.detect.xid.scan import scan_path
    from slurm_hooks.detect.xid.source import FileSource, scan_new

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "kern.log")
        t0 = time.perf_counter()
        nlines, nxids = generate(log, args.mb)
        size = os.path.getsize(log)
        print(
            f"generated {size / 1e6:.0f} MB, {nlines} lines, {nxids} XID lines ({100 * nxids / nlines:.3f} %) in {time.perf_counter() - t0:.1f}s"
        )

        def grep() -> None:
            # Output to a pipe: GNU grep stops at the first match when stdout is /dev/null.
            subprocess.run(["grep", "-E", "NVRM: Xid", log], stdout=subprocess.PIPE, check=False)

        grep()  # warm the page cache
        g = best_of(grep, 3)
        result = None

        def scan() -> None:
            nonlocal result
            result = scan_path(log)

        s = best_of(scan, 3)
        assert result is not None
        print(f"grep -E 'NVRM: Xid' |  {g:7.3f} s  ({size / g / 1e6:6.0f} MB/s)")
        print(
            f"full scan (in-process): {s:7.3f} s  ({size / s / 1e6:6.0f} MB/s)  events={result.stats.events} aggregates={len(result.aggregates)}"
        )
        print(f"ratio scan/grep:        {s / g:7.2f}x  (goal <= 2x)")

        state = os.path.join(tmp, "state")
        src = FileSource(log)
        t0 = time.perf_counter()
        scan_new(src, state)
        print(
            f"first incremental scan: {time.perf_counter() - t0:7.3f} s (whole file, cursor saved)"
        )
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            scan_new(FileSource(log), state)
            times.append(time.perf_counter() - t0)
        print(
            f"nothing new (in-process): median {1e3 * statistics.median(times):.3f} ms, max {1e3 * max(times):.3f} ms  (goal < 5 ms)"
        )

        # Installed packages have bytecode; let the child write and reuse it.
        # Installed packages have bytecode; let the child write and reuse it.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        bare = [sys.executable, "-c", "pass"]
        code = (
            "import sys\n"
            "from slurm_hooks.detect.xid.source import FileSource, scan_new\n"
            f"r = scan_new(FileSource({log!r}), {state!r})\n"
            "assert not r.aggregates\n"
            "print(','.join(sorted(m for m in ('click', 'requests', 'pynvml', 'psutil') if m in sys.modules)))\n"
        )
        inc = [sys.executable, "-c", code]
        subprocess.run(inc, env=env, check=True, stdout=subprocess.DEVNULL)  # write .pyc
        tb, ti = [], []
        for _ in range(21):  # interleaved, so background load hits both alike
            tb.append(best_of(lambda: subprocess.run(bare, env=env, check=True), 1))
            ti.append(
                best_of(
                    lambda: subprocess.run(inc, env=env, check=True, stdout=subprocess.DEVNULL), 1
                )
            )
        mb, mi = statistics.median(tb), statistics.median(ti)
        print(
            f"fresh interpreter, nothing new: bare python {1e3 * mb:.1f} ms, "
            f"import + scan_new {1e3 * mi:.1f} ms, difference {1e3 * (mi - mb):.1f} ms (median of 21)"
        )
        out = subprocess.run(
            inc, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        print(f"heavy modules imported on the scan path: {out or 'none'}")


if __name__ == "__main__":
    main()
