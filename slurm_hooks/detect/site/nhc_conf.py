"""Reading an nhc.conf the way NHC reads it (no NHC code: its documented
rules and ``nhc_load_conf``'s behaviour).

* Each line is ``TARGET || CHECK``; surrounding blanks are trimmed.  A
  target starting with ``#`` is a comment; an empty target or check is
  skipped.
* NHC reads with bash's ``read`` (no ``-r``): a backslash at the end of a
  line joins the next one, and a backslash before any other character
  keeps that character only.
* The check is shell words (quotes group words); ``VAR=value`` and
  ``export VAR=value`` set a variable for the checks after it.
* Targets are NHC match strings: ``*``, a glob, ``/regex/``, ``{hostlist}``,
  each negatable with ``!``; ``@group`` names a node group the caller
  resolves (a hostlist or a Slurm feature).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class ConfLine:
    """One logical line of the file (continuations joined)."""

    lineno: int
    text: str
    target: str
    check: str


def _bash_read(raw: str) -> str:
    """What ``read`` without ``-r`` leaves of a line: ``\\x`` -> ``x``."""
    out = []
    i = 0
    while i < len(raw):
        if raw[i] == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first line number, line) with backslash-newline continuations joined."""
    pending: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = n
        stripped = raw.rstrip("\r")
        # An odd number of trailing backslashes continues the line.
        trail = len(stripped) - len(stripped.rstrip("\\"))
        if trail % 2 == 1:
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        yield start, "".join(pending)
        pending = []
    if pending:
        yield start, "".join(pending)


def read_conf(text: str) -> list[ConfLine]:
    """Every line NHC would consider (comments and blank lines left out)."""
    out = []
    for lineno, raw in logical_lines(text):
        line = _bash_read(raw)
        target, sep, check = line.partition("||")
        target, check = target.strip(), check.strip()
        if target.startswith("#") or (not target and not check):
            continue
        if not sep:
            if line.strip():
                out.append(ConfLine(lineno, raw.strip(), "", line.strip()))
            continue
        out.append(ConfLine(lineno, raw.strip(), target, check))
    return out


def assignment(check: str) -> tuple[str, str] | None:
    """``export VAR=value`` / ``VAR=value`` -> (VAR, value unquoted), else None."""
    m = _ASSIGN.match(check.strip())
    if not m:
        return None
    try:
        words = shlex.split(m.group(2)) if m.group(2).strip() else [""]
    except ValueError:
        return None
    if len(words) != 1:
        return None
    return m.group(1), words[0]


class ShellSyntax(ValueError):
    """A check line whose words cannot be read without running a shell."""


def words(check: str, variables: dict[str, str]) -> list[str]:
    """The check's words, ``$VAR`` expanded from ``variables`` (outside
    single quotes, as bash would).  Raises ShellSyntax for what needs a
    shell: command substitution, arithmetic, pipes, unknown variables."""
    check = _ARITH.sub(lambda m: _arith(m.group(1), variables), check)
    if any(tok in check for tok in ("$(", "`")):
        raise ShellSyntax("uses command substitution ($(...), `...`)")
    try:
        lexer = shlex.shlex(check, posix=True, punctuation_chars=";|&<>")
        lexer.whitespace_split = True
        raw = list(lexer)
    except ValueError as exc:
        raise ShellSyntax(f"unbalanced quotes: {exc}") from exc
    if any(w in (";", "|", "||", "&&", "&", ">", "<", ">>") for w in raw):
        raise ShellSyntax("is a shell pipeline or list, not one check")
    # Expand variables outside single quotes: re-split the original with
    # the variables substituted where bash would substitute them.
    expanded = [
        part if part.startswith("'") else expand(part, variables)
        for part in _split_keep_quotes(check)
    ]
    try:
        return shlex.split("".join(expanded))
    except ValueError as exc:
        raise ShellSyntax(f"unbalanced quotes: {exc}") from exc


def expand(text: str, variables: dict[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` in ``text`` -> their values; raises
    ShellSyntax naming a variable that is not set."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise ShellSyntax(f"uses ${name}, not set in this file")
        return variables[name]

    return _VAR.sub(sub, text)


_ARITH = re.compile(r"\$\(\((.*?)\)\)")
_DEFAULTED = re.compile(r"\$\{([A-Za-z_]\w*):-([^}]*)\}")
#: What NHC knows about the node only when it runs (check_hw_cpuinfo's counts).
NODE_FACTS = ("HW_CORES", "HW_THREADS", "HW_SOCKETS")


def _arith(expr: str, variables: dict[str, str]) -> str:
    """``$((...))`` of numbers and known variables -> its value; of one node
    fact times a number (``2*HW_CORES``) -> ``@HW_CORES*2`` for the checks
    that take a per-core limit.  Anything else raises ShellSyntax."""
    e = _DEFAULTED.sub(lambda m: variables.get(m.group(1), m.group(2)), expr)
    e = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", e)

    def name(m: re.Match[str]) -> str:
        n = m.group(0)
        if n in NODE_FACTS:
            return n
        if n in variables and re.fullmatch(r"-?\d+", variables[n].strip()):
            return variables[n].strip()
        raise ShellSyntax(f"uses arithmetic on ${n}, not set in this file")

    e = re.sub(r"[A-Za-z_]\w*", name, e).replace(" ", "")
    facts = [f for f in NODE_FACTS if f in e]
    if facts:
        m = re.fullmatch(rf"(?:(\d+)\*)?({facts[0]})(?:\*(\d+))?", e)
        if len(facts) > 1 or m is None or (m.group(1) and m.group(3)):
            raise ShellSyntax(f"uses arithmetic on node facts ({expr}) beyond N*{facts[0]}")
        return f"@{facts[0]}*{m.group(1) or m.group(3) or 1}"
    if not re.fullmatch(r"[\d+\-*/()]+", e):
        raise ShellSyntax(f"uses arithmetic NHC evaluates at run time: $(({expr}))")
    try:
        value = _int_eval(e)
    except (ValueError, ZeroDivisionError) as exc:
        raise ShellSyntax(f"bad arithmetic $(({expr})): {exc}") from exc
    return str(value)


def _int_eval(e: str) -> int:
    """Integer arithmetic (+ - * / and parentheses), as bash's $((...))."""
    import ast

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(n.op, ast.Div):
                return int(a / b)
        raise ValueError("only + - * / on integers")

    return ev(ast.parse(e, mode="eval"))


def _split_keep_quotes(s: str) -> list[str]:
    """``s`` cut into single-quoted pieces and the rest (kept verbatim)."""
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(s):
        if s[i] == "'":
            j = s.find("'", i + 1)
            j = len(s) - 1 if j < 0 else j
            parts.append("".join(cur))
            parts.append(s[i : j + 1])
            cur, i = [], j + 1
        else:
            cur.append(s[i])
            i += 1
    parts.append("".join(cur))
    return [p for p in parts if p]
