"""Bounded loaders for files a job's user writes: JSON and pickle with hard limits.  Pure.

A flight-recorder dump or an ``ncclras -f json`` output is written by the
job's user, and the watcher that reads it runs as root beside the fault
path.  ``json.loads`` and the C unpickler trust their input's shape:

* 100,000 nested JSON arrays raise ``RecursionError`` (not ``ValueError``);
* the C unpickler allocates a ``BINBYTES8`` / ``BYTEARRAY8`` length before it
  reads a byte (a few hundred bytes ask for gigabytes), grows its memo to
  the largest ``LONG_BINPUT`` index it sees, and inserts integer keys whose
  hashes all collide (``k * (2**61 - 1)``) in quadratic time.

So neither runs on user input here.  :func:`load_json` counts brackets and
separators (C-speed ``bytes.count``) and measures nesting before ``json``
parses anything; :func:`load_pickle` walks the opcodes with
``pickletools.genops`` (whose reads stop at the data's end) and builds the
value itself: only plain containers and scalars, dict keys only strings,
small integers, booleans or None, string/bytes lengths, memo entries, items
and CPU time all capped.  Every refusal is a :class:`Rejected` with its
reason, never an exception.
"""

from __future__ import annotations

import io
import json
import pickletools
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What one user-written document may cost."""

    #: Bytes of the file.
    max_bytes: int = 8 << 20
    #: Values (container items, JSON separators, pickle opcodes).
    max_items: int = 500_000
    #: Containers nested in containers.
    max_depth: int = 64
    #: Characters of one string or bytes value.
    max_str: int = 1 << 20
    #: Entries of the pickle memo.
    max_memo: int = 100_000
    #: Bits of one pickled integer (a pickle can hold one of any length, and
    #: ``str()`` of one over 4,300 digits raises).
    max_int_bits: int = 64
    #: Seconds of this thread's CPU for one document.
    max_cpu_s: float = 2.0


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Rejected:
    """A document refused, and why (what the caller logs, counts and reports)."""

    why: str

    def __str__(self) -> str:
        return f"rejected: {self.why}"


class _Refused(Exception):  # noqa: N818 - internal; always turned into Rejected
    pass


# -- JSON ---------------------------------------------------------------------------------

_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def load_json(data: bytes | str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The JSON value of ``data``, or :class:`Rejected`.  Brackets inside
    strings count as nesting too: a real document never comes near the
    limits, so only a hostile one pays for that caution."""
    raw = data.encode("utf-8", errors="replace") if isinstance(data, str) else data
    if len(raw) > limits.max_bytes:
        return Rejected(f"{len(raw)} bytes, more than {limits.max_bytes}")
    items = raw.count(b",") + raw.count(b"[") + raw.count(b"{") + raw.count(b":")
    if items > limits.max_items:
        return Rejected(f"about {items} values, more than {limits.max_items}")
    # Bounded by max_items: the loop visits at most that many brackets, and
    # stops at the first one past max_depth (a nesting bomb costs 65 steps).
    depth = 0
    for b in raw.translate(None, _BRACKETS):
        depth += _STEP[b]
        if depth > limits.max_depth:
            return Rejected(f"nested more than {limits.max_depth} deep")
    try:
        return json.loads(raw.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError) as exc:
        return Rejected(f"not JSON: {str(exc)[:120]}")


# -- pickle -------------------------------------------------------------------------------

_MARK = object()
#: Opcodes that would construct an object, call something or read outside state.
_FORBIDDEN = frozenset(
    {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX",
     "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER"}
)  # fmt: skip
_SCALARS = frozenset(
    {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
     "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
     "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
)  # fmt: skip
#: Keys whose hashes cannot be made to collide on purpose (str hashing is keyed).
_KEY_INT = 1 << 31


def _key(k: Any) -> Any:
    if k is None or isinstance(k, (str, bool)):
        return k
    if isinstance(k, int) and -_KEY_INT < k < _KEY_INT:
        return k
    if isinstance(k, bytes):
        return k
    raise _Refused(f"a dict key of type {type(k).__name__} (only strings and small integers)")


class _Builder:
    """A pickle machine for plain values only, every cost counted."""

    def __init__(self, limits: Limits):
        self.lim = limits
        self.stack: list[Any] = []
        self.memo: dict[int, Any] = {}
        self.items = 0
        self.depth: dict[int, int] = {}  # id(container) -> nesting, for the depth limit

    def _depth_of(self, values: list[Any]) -> int:
        d = max((self.depth.get(id(v), 0) for v in values), default=0) + 1
        if d > self.lim.max_depth:
            raise _Refused(f"nested more than {self.lim.max_depth} deep")
        return d

    def _made(self, container: Any, contents: list[Any]) -> Any:
        self.depth[id(container)] = self._depth_of(contents)
        return container

    def _marked(self) -> list[Any]:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] is _MARK:
                out = self.stack[i + 1 :]
                del self.stack[i:]
                return out
        raise _Refused("no MARK")

    def _pop(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise _Refused("stack underflow")
        return self.stack.pop()

    def _top(self) -> Any:
        if not self.stack or self.stack[-1] is _MARK:
            raise _Refused("stack underflow")
        return self.stack[-1]

    def _grow(self, target: Any, contents: list[Any]) -> None:
        d = self._depth_of(contents)
        self.depth[id(target)] = max(self.depth.get(id(target), 1), d)

    def _grown_top(self, kind: type, name: str, contents: list[Any]) -> Any:
        """The container on top of the stack, which opcode ``name`` adds
        ``contents`` to: refused unless it is a ``kind``, and nested no
        deeper than allowed once they are in."""
        target = self._top()
        if not isinstance(target, kind):
            raise _Refused(f"{name} to a non-{kind.__name__}")
        self._grow(target, contents)
        return target

    def step(self, name: str, arg: Any) -> bool:  # noqa: C901, PLR0912 - one branch per opcode
        """One opcode; True at STOP."""
        s = self.stack
        if name in _SCALARS:
            if isinstance(arg, (str, bytes)) and len(arg) > self.lim.max_str:
                raise _Refused(f"a string of {len(arg)} characters, more than {self.lim.max_str}")
            if isinstance(arg, int) and arg.bit_length() > self.lim.max_int_bits:
                raise _Refused(
                    f"an integer of {arg.bit_length()} bits, more than {self.lim.max_int_bits}"
                )
            s.append(bytes(arg) if name == "BYTEARRAY8" else arg)
        elif name in ("PROTO", "FRAME"):
            pass
        elif name == "STOP":
            return True
        elif name == "MARK":
            s.append(_MARK)
        elif name == "POP":
            self._pop()
        elif name == "POP_MARK":
            self._marked()
        elif name == "DUP":
            s.append(self._top())
        elif name == "NONE":
            s.append(None)
        elif name in ("NEWTRUE", "NEWFALSE"):
            s.append(name == "NEWTRUE")
        elif name == "EMPTY_LIST":
            s.append(self._made([], []))
        elif name == "EMPTY_DICT":
            s.append(self._made({}, []))
        elif name == "EMPTY_TUPLE":
            s.append(())
        elif name == "EMPTY_SET":
            s.append(self._made(set(), []))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            vals = [self._pop() for _ in range(n)][::-1]
            s.append(self._made(tuple(vals), vals))
        elif name == "TUPLE":
            vals = self._marked()
            s.append(self._made(tuple(vals), vals))
        elif name == "LIST":
            vals = self._marked()
            s.append(self._made(list(vals), vals))
        elif name == "DICT":
            vals = self._marked()
            if len(vals) % 2:
                raise _Refused("odd DICT")
            d = {_key(vals[i]): vals[i + 1] for i in range(0, len(vals), 2)}
            s.append(self._made(d, vals))
        elif name == "FROZENSET":
            vals = self._marked()
            s.append(self._made(frozenset(_key(v) for v in vals), vals))
        elif name in ("APPEND", "APPENDS"):
            vals = [self._pop()] if name == "APPEND" else self._marked()
            self._grown_top(list, name, vals).extend(vals)
        elif name == "ADDITEMS":
            vals = self._marked()
            self._grown_top(set, name, vals).update(_key(v) for v in vals)
        elif name in ("SETITEM", "SETITEMS"):
            vals = [self._pop(), self._pop()][::-1] if name == "SETITEM" else self._marked()
            target = self._top()
            if not isinstance(target, dict) or len(vals) % 2:
                raise _Refused(f"{name} to a non-dict")
            self._grow(target, vals)
            for i in range(0, len(vals), 2):
                target[_key(vals[i])] = vals[i + 1]
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            idx = len(self.memo) if name == "MEMOIZE" else int(arg)
            if idx not in self.memo and len(self.memo) >= self.lim.max_memo:
                raise _Refused(f"more than {self.lim.max_memo} memo entries")
            self.memo[idx] = self._top()
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            try:
                s.append(self.memo[int(arg)])
            except KeyError:
                raise _Refused(f"memo {arg} unset") from None
        elif name in _FORBIDDEN:
            raise _Refused(f"{name} refused (only plain values are read)")
        else:
            raise _Refused(f"opcode {name} not supported")
        return False


def load_pickle(data: bytes, limits: Limits = DEFAULT_LIMITS) -> Any:
    """The plain value a pickle holds, or :class:`Rejected`: no class is
    looked up, no callable runs, nothing is allocated before its bytes are
    there, and every limit is checked as the value is built."""
    if len(data) > limits.max_bytes:
        return Rejected(f"{len(data)} bytes, more than {limits.max_bytes}")
    b = _Builder(limits)
    deadline = time.thread_time() + limits.max_cpu_s
    try:
        for n, (op, arg, _pos) in enumerate(pickletools.genops(io.BytesIO(data))):
            if n > limits.max_items:
                raise _Refused(f"more than {limits.max_items} opcodes")
            if not n & 1023 and time.thread_time() > deadline:
                raise _Refused(f"more than {limits.max_cpu_s:g}s of CPU")
            if b.step(op.name, arg):
                if len(b.stack) != 1:
                    raise _Refused("STOP with a bad stack")
                return b.stack[0]
    except _Refused as exc:
        return Rejected(str(exc))
    except (ValueError, TypeError, OverflowError, EOFError) as exc:
        # genops' own checks: truncated data, a bad opcode, a length past the end.
        return Rejected(f"not a pickle: {str(exc)[:120]}")
    return Rejected("no STOP")
