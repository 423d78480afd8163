"""Which of a scripts directory's ``*.nhc`` a site function needs sourced.

NHC sources every ``*.nhc`` of ``$INCDIR`` before it runs any check.  For
one site function (kind ``nhc_function``) most of that is parse work whose
result is never used: NHC 1.4.3's own twelve scripts are some 150 kB of
bash, about 55 M instructions of every run, while a typical site function
calls a few helpers of its own file.  So the files whose loading cannot
change what the function does are left out, by a conservative reading of
the text (nothing is run), file by file:

* A file is *inert* when, outside its function bodies, it has only
  function definitions, assignments without command substitution,
  ``if``/``elif``/``else``/``fi`` lines without one, and ``: ${NAME:=...}``
  defaults; and no top-level ``export`` or assignment to a variable of the
  environment (``PATH``, ``LC_ALL``, ...), which would reach the commands
  the function runs.  Any other file (top-level commands, braces this
  reading cannot balance) is always sourced, as NHC sources it.
* The *needed* files: every non-inert file, every file that defines the
  function, then, repeatedly, every inert file that defines a function or
  sets (at its top level) a variable whose name is a word of a needed file,
  of the function's arguments or of its variables.  A function another
  file redefines is then a word of a needed file too, so both are sourced,
  in NHC's order (the shim sources the chosen files in bash's glob order).
* Everything is sourced when a needed file may call a function whose name
  is made at run time (``eval``, an expansion glued to a name such as
  ``check_$KIND`` in a command's place, ``${!NAME}``, ``declare -F``,
  ``compgen``), when no file defines the function (the verdict then says
  so, as under NHC), or when a file cannot be read.

What an inert file left out would have done is define functions no needed
file names and set variables no needed file reads: the function's run is
the same.  Pure: the caller reads the files (bounded) and passes the text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from slurm_hooks.core.record import record

#: A function definition (``function f``, ``function f()``, ``f()``).
DEFINITION = re.compile(
    r"^\s*(?:function\s+([A-Za-z_][A-Za-z0-9_]*)|([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*\))", re.M
)
_DEF_LINE = re.compile(
    r"^\s*(?:function\s+[A-Za-z_]\w*\s*(?:\(\s*\))?|[A-Za-z_]\w*\s*\(\s*\))\s*\{?\s*$"
)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)(?:\[[^]]*\])?\+?=")
_DECLARE = re.compile(r"^(export|declare|typeset|readonly)\b(.*)$")
_DEFAULT = re.compile(r"^:\s+\"?\$\{([A-Za-z_]\w*):?=[^}]*\}\"?\s*$")
_CONDITION = re.compile(r"^(?:(?:if|elif)\s+\[\[.*\]\]\s*;\s*then|else|fi)$")
#: A name made at run time: ``eval``, an expansion glued to name characters,
#: an indirect expansion, or a listing of the functions defined.
_DYNAMIC = re.compile(
    r"\beval\b|\$\{!|\bcompgen\b|\b(?:declare|typeset)\s+-[a-zA-Z]*[Ff]"
    r"|(?:^|[;&|(`]|\b(?:then|do|else)\b)\s*\"?"
    r"(?:[A-Za-z_]\w*\$|\$\{[A-Za-z_]\w*\}[\w$]|\$[A-Za-z_]\w*\$)",
    re.M,
)
#: Variables that reach a program without being exported by the script
#: (the shell's own and those its commands read from the environment).
SHELL_VARIABLES = frozenset(
    {"PATH", "IFS", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "SHELL", "CDPATH",
     "GLOBIGNORE", "POSIXLY_CORRECT", "BASH_ENV", "ENV", "PS4", "TIMEFORMAT", "HOSTNAME",
     "FUNCNEST", "BASHOPTS", "SHELLOPTS", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH"}
)  # fmt: skip
_STRIP = re.compile(r"\\.|'[^'\n]*'|\"(?:\\.|[^\"\\\n])*\"|\$\{[^{}\n]*\}")


@record
class Script:
    """What one ``*.nhc`` defines, sets at its top level, and names."""

    name: str
    defines: frozenset[str]
    sets: frozenset[str]
    words: frozenset[str]
    #: Loading it has no effect beyond its definitions and ``sets``.
    inert: bool
    #: It may call a function whose name is made at run time.
    dynamic: bool


def _code(text: str) -> list[str]:
    """The lines without comment lines and blank lines."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _top_level(lines: Sequence[str]) -> tuple[set[str], bool]:
    """The variables the file's top level sets, and whether that top level is
    inert (see the module's docstring); braces are counted outside quotes
    and ``${...}``, and a count that goes below zero or does not end at
    zero makes the file not inert."""
    sets: set[str] = set()
    inert = True
    depth = 0
    for line in lines:
        s = line.strip()
        if depth == 0 and not _DEF_LINE.match(line):
            inert = inert and _inert_line(s, sets)
        depth += _braces(line)
        if depth < 0:
            return sets, False
    return sets, inert and depth == 0


def _braces(line: str) -> int:
    code = _STRIP.sub("", line)
    code = code.split(" #", 1)[0]
    return code.count("{") - code.count("}")


def _inert_line(s: str, sets: set[str]) -> bool:
    if "$(" in s or "`" in s or "<(" in s or ">(" in s:
        return False
    if _CONDITION.match(s):
        return True
    m = _DEFAULT.match(s)
    if m:
        sets.add(m.group(1))
        return _harmless(m.group(1))
    m = _ASSIGN.match(s)
    if m:
        sets.add(m.group(1))
        return _harmless(m.group(1))
    m = _DECLARE.match(s)
    if m:
        if any(w.startswith("-") and "f" in w for w in m.group(2).split()):
            return False  # export -f: a function reaches the programs it runs
        names = [w.split("=", 1)[0] for w in m.group(2).split() if not w.startswith("-")]
        names = [n for n in names if _WORD.fullmatch(n)]
        sets.update(names)
        return all(_harmless(n) for n in names)
    return False


def _harmless(var: str) -> bool:
    """Setting ``var`` cannot reach a program the function runs (it is not a
    variable of the shell's or of this environment's)."""
    return (
        var not in SHELL_VARIABLES
        and not var.startswith(("LC_", "BASH"))
        and (var not in os.environ)
    )


def read_script(name: str, text: str) -> Script:
    lines = _code(text)
    body = "\n".join(lines)
    sets, inert = _top_level(lines)
    return Script(
        name=name,
        defines=frozenset(a or b for a, b in DEFINITION.findall(body)),
        sets=frozenset(sets),
        words=frozenset(_WORD.findall(body)),
        inert=inert,
        dynamic=_DYNAMIC.search(body) is not None,
    )


def needed(scripts: Sequence[Script], function: str, words: Iterable[str]) -> set[str] | None:
    """The names of the scripts to source for ``function`` (called with
    ``words``: its arguments and its variables' names and values), or None
    for all of them (see the module's docstring)."""
    if not any(function in s.defines for s in scripts):
        return None  # defined nowhere we can see: source all (the verdict says so)
    want = {function}
    for w in words:
        want.update(_WORD.findall(w))
    chosen: set[str] = set()
    grew = True
    while grew:
        grew = False
        for s in scripts:
            if s.name in chosen:
                continue
            if not s.inert or s.defines & want or s.sets & want:
                chosen.add(s.name)
                want |= s.words
                grew = True
                if s.dynamic:
                    return None
    return chosen
