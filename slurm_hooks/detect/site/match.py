"""NHC's match strings and the hosts a site check applies to.

A match string (NHC's "mstr") is a glob by default, ``/regex/`` between
slashes (searched, as bash's ``=~`` does), ``{hostlist}`` in braces, each
negated by a leading ``!``.  The same strings select hosts, processes, mount
types and sources, and the lines of a file or a command's output.  Pure:
the hostlist is ClusterShell's (``core.hostlist``), imported only for a
``{...}`` or ``hostlist`` selector.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection
from functools import lru_cache

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.record import record

#: POSIX bracket classes (bash's ERE knows them, Python's re does not).
_POSIX = {
    "[:alpha:]": "a-zA-Z", "[:digit:]": "0-9", "[:alnum:]": "a-zA-Z0-9", "[:upper:]": "A-Z",
    "[:lower:]": "a-z", "[:space:]": r"\s", "[:blank:]": r" \t", "[:xdigit:]": "0-9A-Fa-f",
    "[:punct:]": r"!-/:-@\[-`{-~", "[:word:]": r"\w", "[:cntrl:]": r"\x00-\x1f\x7f",
    "[:print:]": r"\x20-\x7e", "[:graph:]": r"\x21-\x7e",
}  # fmt: skip


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    """An ERE as bash's ``=~`` reads it, compiled by Python (POSIX classes
    rewritten)."""
    for cls, py in _POSIX.items():
        pattern = pattern.replace(cls, py)
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"invalid regular expression /{pattern}/: {exc}") from exc


def validate_mstr(mstr: str) -> None:
    """Raise ConfigError for a match string that cannot match anything
    (a bad regex, a bad hostlist)."""
    body = mstr[1:] if mstr.startswith("!") else mstr
    if len(body) >= 2 and body[0] == "/" and body[-1] == "/":
        _regex(body[1:-1])
    elif len(body) >= 2 and body[0] == "{" and body[-1] == "}":
        from slurm_hooks.core.hostlist import expand

        expand(body[1:-1])


def mcheck(value: str, mstr: str) -> bool:
    """Whether ``value`` matches the NHC match string ``mstr``."""
    negate = mstr.startswith("!")
    body = mstr[1:] if negate else mstr
    if len(body) >= 2 and body[0] == "/" and body[-1] == "/":
        hit = _regex(body[1:-1]).search(value) is not None
    elif len(body) >= 2 and body[0] == "{" and body[-1] == "}":
        from slurm_hooks.core.hostlist import contains

        hit = contains(body[1:-1], value)
    else:
        hit = fnmatch.fnmatchcase(value, body)
    return hit != negate


def is_negated(mstr: str) -> bool:
    return mstr.startswith("!")


@record
class Hosts:
    """Which nodes a site check applies to: every selector given must match.

    ``match``: an NHC match string (``*``, ``gpu*``, ``/^n0[0-5]/``,
    ``{n[01-64]}``, ``!login*``); ``hostlist``: a Slurm hostlist; ``glob``;
    ``regex`` (searched); ``feature``: a Slurm node feature the node has
    (``AvailableFeatures``), read only when some check asks for one."""

    match: str = ""
    hostlist: str = ""
    glob: str = ""
    regex: str = ""
    feature: str = ""

    def validate(self) -> None:
        if self.match:
            validate_mstr(self.match)
        if self.regex:
            _regex(self.regex)
        if self.hostlist:
            from slurm_hooks.core.hostlist import expand

            expand(self.hostlist)

    def applies(self, node: str, features: Collection[str] | None) -> bool:
        """Whether the check runs on ``node``.  ``features``: the node's
        Slurm features (None when not known: a feature selector then does
        not match, and the check reports that it could not tell)."""
        if self.match and not mcheck(node, self.match):
            return False
        if self.glob and not fnmatch.fnmatchcase(node, self.glob):
            return False
        if self.regex and _regex(self.regex).search(node) is None:
            return False
        if self.hostlist:
            from slurm_hooks.core.hostlist import contains

            if not contains(self.hostlist, node):
                return False
        if self.feature:
            return features is not None and self.feature in features
        return True

    def describe(self) -> str:
        parts = [
            f"{k}={v}"
            for k, v in (
                ("match", self.match),
                ("hostlist", self.hostlist),
                ("glob", self.glob),
                ("regex", self.regex),
                ("feature", self.feature),
            )
            if v
        ]
        return " ".join(parts) or "every node"
