"""What a hostile user can put in the progress directory, played by that user.

Run as the unprivileged lab user (``runuser -u sltest -- python -m
slurm_hooks_lab.hostile ...``, see :func:`plant`), like any job could:

* ``--stalled N``: N job directories of jobs that do not run here, each with
  two backdated records for rank 0 naming ``--node`` (the issue #27 attack
  that made the watcher ask Slurm about every directory, every pass);
* ``--job J``: in job J's directory (a job of the user's that does run on the
  node), stalled records and the hostile files: a flight-recorder dump of
  100,000 nested JSON arrays, a pickle dict whose integer keys all hash alike
  (quadratic insertion), a pickle that claims a 2 GiB bytes value and a memo
  index of 2**25 (what the C unpickler allocates before it reads), the same
  nesting as an ``ncclras -f json`` output and as a rank's record file.

Bytes are written by hand (the opcodes named in each builder): building the
colliding dict with ``pickle.dumps`` would itself take quadratic time.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

#: 2**61 - 1: CPython's integer hash modulus; multiples of it all hash to 0.
_MODULUS = (1 << 61) - 1


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _long1(n: int) -> bytes:
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def nested_json(depth: int = 100_000) -> bytes:
    return b"[" * depth + b"]" * depth


def hash_bomb(keys: int = 40_000) -> bytes:
    """``{"version": "2.5", "pg_status": {k * (2**61 - 1): 0 for k in ...}}``."""
    body = b"".join(_long1(k * _MODULUS) + b"K\x00" for k in range(1, keys + 1))
    return (
        b"\x80\x02}("  # PROTO 2, EMPTY_DICT, MARK
        + _unicode("version") + _unicode("2.5") + _unicode("pg_status")
        + b"}(" + body + b"u"  # EMPTY_DICT, MARK, key/value pairs, SETITEMS
        + b"u."  # SETITEMS, STOP
    )  # fmt: skip


def string_bomb() -> bytes:
    """A dump whose version is a ``BINBYTES8`` of 2 GiB (12 bytes follow)
    after a ``LONG_BINPUT`` to memo slot 2**25."""
    return (
        b"\x80\x04}(" + _unicode("version")
        + b"N" + b"r" + struct.pack("<I", 1 << 25)  # NONE, LONG_BINPUT
        + b"\x8e" + struct.pack("<Q", 1 << 31) + b"x" * 12  # BINBYTES8
        + b"u."
    )  # fmt: skip


def records(
    job: str, node: str, now: float, *, pid: int = 1, ages: tuple[float, float] = (1100.0, 1000.0)
) -> str:
    """Two backdated records of rank 0, ``ages`` seconds old (a stall of
    1,000 s by default)."""
    return "".join(
        f"P1 job={job} restart=0 rank=0 node={node} pid={pid} step={s} time={now - t:.3f}\n"
        for s, t in enumerate(ages)
    )


def write_stalled(base: Path, node: str, count: int, first: int) -> None:
    now = time.time()
    for i in range(count):
        job = str(first + i)
        d = base / job
        d.mkdir(exist_ok=True)
        (d / "rank0.log").write_text(records(job, node, now))


def write_hostile(base: Path, node: str, job: str, hash_keys: int) -> None:
    d = base / job
    d.mkdir(exist_ok=True)
    # A stall of 10 s, not 1,000: the rank's pid is 1 (init), and a first
    # record older than init's start reads as pid reuse (the rank gone, so
    # never a stall, and the job's files never read) on a machine booted less
    # than 1,100 s before (a CI machine, 2026-12-07).  hang_s is a few seconds.
    (d / "rank0.log").write_text(records(job, node, time.time(), ages=(12.0, 10.0)))
    (d / "rank1.log").write_bytes(nested_json() + b"\n")
    (d / "fr_0.json").write_bytes(nested_json())
    (d / "fr_1").write_bytes(hash_bomb(hash_keys))
    (d / "fr_2").write_bytes(string_bomb())
    (d / "ras.txt").write_bytes(b"{" + b'"c":' * 1 + nested_json() + b"}")


def plant(
    user: str,
    base: Path,
    node: str,
    *,
    stalled: int = 0,
    first: int = 5_000_000,
    job: str | None = None,
    hash_keys: int = 40_000,
    env: dict[str, str] | None = None,
) -> None:
    """Run this module as ``user`` (the attack is the user's, not root's), with
    the system's python3 reading it on stdin (it needs only the standard
    library; the user may not be able to read our interpreter)."""
    argv = ["runuser", "-u", user, "--", "/usr/bin/python3", "-", "--dir", str(base), "--node", node, "--stalled", str(stalled), "--first", str(first),
            "--hash-keys", str(hash_keys)]  # fmt: skip
    if job is not None:
        argv += ["--job", job]
    full = {**os.environ, **(env or {})}
    source = Path(__file__).read_bytes()
    subprocess.run(argv, check=True, env=full, cwd="/", timeout=600, input=source)  # noqa: S603


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, type=Path)
    p.add_argument("--node", required=True)
    p.add_argument("--stalled", type=int, default=0)
    p.add_argument("--first", type=int, default=5_000_000)
    p.add_argument("--job")
    p.add_argument("--hash-keys", type=int, default=40_000)
    args = p.parse_args(argv)
    os.umask(0o022)
    if args.stalled:
        write_stalled(args.dir, args.node, args.stalled, args.first)
    if args.job:
        write_hostile(args.dir, args.node, args.job, args.hash_keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
