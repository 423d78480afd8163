"""The ``gpu_burn`` engine (wilicc/gpu-burn): argv, run, and a parser for
its real output.

What the parser has to cope with, all seen in the wild:

* progress lines are rewritten in place with ``\\r``, so one captured line
  holds many updates; each update is
  ``10.0%  proc'd: 3 (4031 Gflop/s) - 3 (4028 Gflop/s)   errors: 0 - 0   temps: 45 C - 46 C``;
* the ``errors`` figures count since the last ``Summary at:`` block and are
  then reset, so totals are summed window by window;
* a dead worker shows ``-1 (0 Gflop/s)`` and ``NNN  (DIED!)``; errors show
  ``NNN  (WARNING!)``; a missing temperature shows ``--``;
* a GPU whose worker failed to initialise (``Couldn't init a GPU test: ...``)
  keeps printing ``0 (0 Gflop/s)`` and is still reported ``OK`` in the final
  summary, because gpu_burn only marks GPUs with errors as FAULTY;
* gpu_burn exits 0 even when GPUs are FAULTY: only the text tells;
* newer versions print ``nvidia-smi -L`` lines (``GPU 0: NVIDIA H100 80GB HBM3
  (UUID: GPU-...)``) first, and with ``-i N`` the only worker is shown as
  column/summary 0 while it runs on device N;
* releases up to 0.6 print counts without Gflop/s and ``/ `` separators;
  up to 2023-03 ``Killing processes.. `` has no newline, so the workers'
  flushed lines (or ``done``) follow on the same line;
* a run is complete when the final ``Tested N GPUs:`` block lists every GPU
  (printed after all workers are reaped), whatever precedes it in a paste.
Samples per release family: tests/data/gpu_burn/README.md.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from slurm_hooks.core.errors import CommandError, CommandTimeout
from slurm_hooks.detect.engines.burnin.model import BurninRun, GpuBurnin
from slurm_hooks.detect.probes import commands

log = logging.getLogger(__name__)

ENGINE = "gpu_burn"

_GPU_LIST = re.compile(r"^\s*GPU (\d+): (.+?) \(UUID: (GPU-[0-9A-Fa-f-]+)\)\s*$")
_SUMMARY = re.compile(r"^\s*GPU (\d+): (OK|FAULTY)\s*$")
_TESTED = re.compile(r"^\s*Tested (\d+) GPUs:")
_INIT = re.compile(
    r"Initialized device (\d+) with (\d+) MB of memory \((\d+) MB available, using (\d+) MB of it\),"
    r" using (FLOATS|DOUBLES)(, using Tensor Cores)?"
)
_PROGRESS = re.compile(
    r"(\d+(?:\.\d+)?)%\s+proc'd:\s*(?P<proc>.*?)\s*errors:\s*(?P<err>.*?)\s*temps:\s*(?P<temps>.*)$"
)
# Releases up to 0.6 print the count alone ("1234 / 1240"), later ones
# "1234 (4031 Gflop/s)"; 0.7 glues the "/ " separator to the closing paren.
_PROC_ITEM = re.compile(r"(-?\d+)(?: \((-?\d+(?:\.\d+)?) Gflop/s\))?")
_ERR_ITEM = re.compile(r"(-?\d+)\s*(?:\((WARNING|DIED)!\))?")
_TEMP_ITEM = re.compile(r"(\d+) C|(--)")
_BURNING = re.compile(r"Burning for (\d+) (?:seconds|secs)")
# Up to 2023-03 "Killing processes.. " has no newline: what the workers flush
# when they exit (and finally "done") follows on the same line.
_KILLING = re.compile(r"^Killing processes(?:\.\. | with SIG\w+ \([^)]*\))?")
_COMPARE = re.compile(r"Using compare file: (\S+)")
_COULDNT_INIT = re.compile(r"Couldn't init a GPU test: (.*)$")
_COMPUTE_FAIL = re.compile(r"Failure during compute: (.*)$")
_CUDA_INIT = re.compile(r"Couldn't init CUDA: (.*)$")
#: A run of digits longer than any count gpu_burn prints (and than int() takes
#: unbounded input for): such a line is skipped and counted.
_OVERLONG_NUMBER = re.compile(r"[0-9]{19}")
_READ_ERR = re.compile(r"read\[(\d+)\] error (-?\d+)")


@dataclass
class _Gpu:
    """Mutable accumulator while parsing; frozen into GpuBurnin at the end."""

    uuid: str | None = None
    name: str | None = None
    processed: int = 0
    died: bool = False
    warned: bool = False
    errors_total: int = 0
    errors_window: int = 0
    gflops: list[float] = field(default_factory=list)
    temps: list[int] = field(default_factory=list)
    verdict: str | None = None
    error_text: str | None = None


def _split_lines(text: str) -> list[str]:
    # \r separates in-place progress updates; treat each as its own line.
    return [ln for ln in re.split(r"\r\n|\r|\n", text)]


def parse_gpu_burn(text: str, *, expected_gpus: int | None = None) -> BurninRun:
    """Parse the combined stdout+stderr of one gpu_burn run.

    Never raises on odd input: unknown lines are ignored (counted at debug
    level), so a future gpu_burn line format degrades to "fewer facts", and
    a run with no progress at all comes back with ``completed=False``.
    """
    gpus: dict[int, _Gpu] = {}
    init_devices: list[int] = []
    errors: list[str] = []
    info: dict[str, str] = {}
    tested: int | None = None
    saw_summary_header = False
    verdicts: set[int] = set()
    killed_line = False
    skipped = 0

    def gpu(i: int) -> _Gpu:
        return gpus.setdefault(i, _Gpu())

    for raw in _split_lines(text):
        line = raw.strip()
        if m := _KILLING.match(line):
            killed_line = True
            line = line[m.end() :].strip()
        if not line:
            continue
        if _OVERLONG_NUMBER.search(line):
            # No gpu_burn figure has 19 digits: a garbled or hostile line,
            # never a reason to stop reading the rest.
            skipped += 1
            continue
        if m := _PROGRESS.search(line):
            procs = _PROC_ITEM.findall(m.group("proc"))
            errs = _ERR_ITEM.findall(m.group("err"))
            temps = _TEMP_ITEM.findall(m.group("temps"))
            for i, (count, gflops) in enumerate(procs):
                g = gpu(i)
                n = int(count)
                if n == -1:
                    g.died = True
                else:
                    g.processed = max(g.processed, n)
                    if gflops and float(gflops) > 0:
                        g.gflops.append(float(gflops))
            for i, (count, note) in enumerate(errs):
                g = gpu(i)
                if note == "DIED":
                    g.died = True
                    continue
                # Cumulative within the current summary window; a negative
                # value is gpu_burn's int overflowing, still a non-zero count.
                g.errors_window = max(g.errors_window, abs(int(count)))
                if note == "WARNING":
                    g.warned = True
            for i, (temp, dash) in enumerate(temps):
                if not dash:
                    gpu(i).temps.append(int(temp))
            continue
        if "Summary at:" in line:
            for g in gpus.values():
                g.errors_total += g.errors_window
                g.errors_window = 0
            continue
        if m := _SUMMARY.match(line):
            if saw_summary_header:
                gpu(int(m.group(1))).verdict = m.group(2)
                verdicts.add(int(m.group(1)))
                continue
        if m := _GPU_LIST.match(line):
            g = gpu(int(m.group(1)))
            g.name, g.uuid = m.group(2).strip(), m.group(3)
            continue
        if m := _TESTED.match(line):
            tested = int(m.group(1))
            saw_summary_header = True
            continue
        if m := _INIT.search(line):
            init_devices.append(int(m.group(1)))
            info["precision"] = m.group(5).lower() + (" tensor" if m.group(6) else "")
            continue
        if m := _COULDNT_INIT.search(line):
            errors.append(f"couldn't init a GPU test: {m.group(1).strip()}")
            continue
        if m := _COMPUTE_FAIL.search(line):
            errors.append(f"failure during compute: {m.group(1).strip()}")
            continue
        if m := _READ_ERR.search(line):
            gpu(int(m.group(1))).died = True
            errors.append(f"read error from worker {m.group(1)}")
            continue
        if "No clients are alive" in line:
            errors.append("no clients are alive: all workers died")
            continue
        if "No CUDA devices" in line:
            errors.append("no CUDA devices")
            continue
        if m := _BURNING.search(line):
            info["duration_s"] = m.group(1)
            continue
        if m := _COMPARE.search(line):
            info["compare_file"] = m.group(1)
            continue
        if m := _CUDA_INIT.search(line):
            errors.append(f"couldn't init CUDA: {m.group(1).strip()}")
            continue
        if line == "done":
            continue
        skipped += 1

    for g in gpus.values():
        g.errors_total += g.errors_window
        g.errors_window = 0

    # gpu_burn -i N: one worker, shown as column 0, running on device N.
    remapped = False
    if len(init_devices) == 1 and init_devices[0] != 0 and 0 in gpus:
        cols = [i for i, g in gpus.items() if g.processed or g.gflops or g.died or g.verdict]
        if cols == [0]:
            dev = init_devices[0]
            col = gpus.pop(0)
            listed = gpus.get(dev)
            if listed is not None:
                col.name, col.uuid = listed.name, listed.uuid
            gpus = {dev: col}
            remapped = True

    # Attach a lone init error to the single GPU that never produced anything.
    idle = [i for i, g in gpus.items() if not g.gflops and not g.processed]
    init_errs = [e for e in errors if e.startswith("couldn't init")]
    if len(idle) == 1 and len(init_errs) == 1 and len(gpus) > 1:
        gpus[idle[0]].error_text = init_errs[0]

    want = tested or expected_gpus
    if want is not None and not remapped:
        for i in range(want):
            gpu(i)

    # The verdict block is the last thing gpu_burn prints, after every worker
    # was reaped: a run is complete when the block lists each tested GPU.
    # "Killing processes" is not required (pasted excerpts drop it).
    completed = tested is not None and tested > 0 and verdicts >= set(range(tested))
    if killed_line:
        info["stopped"] = "killed"
    if skipped:
        log.debug("gpu_burn parser skipped %d unrecognised lines", skipped)
    duration = float(info["duration_s"]) if "duration_s" in info else None
    dtype = {"floats": "fp32", "floats tensor": "tf32", "doubles": "fp64", "doubles tensor": "fp64"}
    measured = dtype.get(info.get("precision", "floats"), "fp32")

    def _by_dtype(samples: list[float]) -> tuple[tuple[str, float], ...]:
        tf = GpuBurnin(index=0, tflops_samples=tuple(x / 1000.0 for x in samples)).tflops
        return () if tf is None else ((measured, tf),)

    result = tuple(
        GpuBurnin(
            index=i,
            uuid=g.uuid,
            name=g.name,
            errors=g.errors_total,
            died=g.died,
            processed=g.processed,
            tflops_samples=tuple(x / 1000.0 for x in g.gflops),
            temps_c=tuple(g.temps),
            verdict=g.verdict,
            error_text=g.error_text,
            tflops_by_dtype=_by_dtype(g.gflops),
        )
        for i, g in sorted(gpus.items())
    )
    return BurninRun(
        engine=ENGINE,
        gpus=result,
        completed=completed,
        duration_s=duration,
        errors=tuple(errors),
        info=tuple(sorted(info.items())),
    )


def build_argv(
    binary: str = "gpu_burn",
    duration_s: int = 10,
    *,
    doubles: bool = False,
    tensor_cores: bool = False,
    memory: str | None = None,
    device: int | None = None,
    compare_file: str | None = None,
) -> list[str]:
    """gpu_burn's argv.  Options first, the duration last (its parser takes
    the first non-option argument as the run length)."""
    argv = [binary]
    if doubles:
        argv.append("-d")
    if tensor_cores:
        argv.append("-tc")
    if memory:
        argv += ["-m", memory]
    if device is not None:
        argv.append(f"-i{device}")
    if compare_file:
        argv += ["-c", compare_file]
    argv.append(str(int(duration_s)))
    return argv


Runner = Callable[..., commands.CommandResult]


def binary_dir(binary: str) -> str:
    """Where ``binary`` (a name on PATH, or a path) lives, as gpu_burn's
    working directory: it reads ``compare.ptx`` from there.  "/" when it is
    not found (the run then fails as a missing binary, UNKNOWN)."""
    found = shutil.which(binary, path=commands.command_env().get("PATH"))
    return os.path.dirname(os.path.realpath(found)) if found else "/"


def run_gpu_burn(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: str | None = None,
    expected_gpus: int | None = None,
    run: Runner = commands.run,
) -> BurninRun:
    """Run gpu_burn and parse what it printed.

    A timeout is a result, not an exception: the run is reported as not
    completed (a hung burn-in is a finding in itself).  A missing binary
    raises CommandError (the check turns that into UNKNOWN).  ``cwd`` is
    where gpu_burn looks for ``compare.ptx`` unless ``-c`` names it.
    """
    try:
        res = run(list(argv), timeout=timeout, check=False, cwd=cwd)
    except CommandTimeout:
        return BurninRun(
            engine=ENGINE,
            completed=False,
            errors=(f"gpu_burn timed out after {timeout:g}s (killed)",),
        )
    except CommandError:
        raise
    parsed = parse_gpu_burn(res.stdout + "\n" + res.stderr, expected_gpus=expected_gpus)
    if res.rc != 0:
        extra = f"gpu_burn exited with rc={res.rc}"
        return BurninRun(
            engine=parsed.engine,
            gpus=parsed.gpus,
            completed=False,
            duration_s=parsed.duration_s,
            errors=(*parsed.errors, extra),
            info=parsed.info,
        )
    return parsed
