"""Validators for the identifiers that leave the engine: user names, job ids,
node names and our own tokens.

Anything that reaches a command line or a message addressed to someone must
pass one of these first.  Each is a strict, ASCII-only whitelist that cannot
start with ``-`` (so no tool can read the value as an option) and holds no
blank, newline or shell/mail metacharacter.  A value that fails is refused
with :class:`InvalidIdentifier`, never "cleaned up": a forged user name
cleaned into a real one would still send mail to the wrong person.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Callable
from typing import Any

from slurm_hooks.core.errors import SlurmHooksError

#: POSIX-portable user names as useradd(8) accepts them (``NAME_REGEX`` of
#: Debian's adduser, minus upper case): at most 32 characters.
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]*[$]?", re.ASCII)
#: A Slurm job id: digits, an array task ``123_4`` or a het component ``123+1``.
_JOB_RE = re.compile(r"[0-9]{1,20}(?:_[0-9]{1,10}|\+[0-9]{1,10})?", re.ASCII)
#: A host name as Slurm's NodeName takes it (RFC 1123 labels, dots allowed).
_NODE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
#: Our own short tokens: incident ids, fault codes, alert kinds.
_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.]{0,63}", re.ASCII)

MAX_USER = 32


class InvalidIdentifier(SlurmHooksError, ValueError):
    """A user, job, node or token that does not have the expected form."""

    def __init__(self, what: str, value: Any) -> None:
        super().__init__(f"invalid {what} {str(value)[:80]!r}")
        self.what = what
        self.value = value


def _check(regex: re.Pattern[str], what: str, value: Any) -> str:
    if not isinstance(value, str) or not regex.fullmatch(value):
        raise InvalidIdentifier(what, value)
    return value


def check_user(
    value: Any, *, resolve: bool = True, getpwnam: Callable[[str], Any] = pwd.getpwnam
) -> str:
    """A passwd user name that exists here (``resolve``): the only form in
    which a job's owner may reach a mail command or a message."""
    name = _check(_USER_RE, "user name", value)
    if len(name) > MAX_USER:
        raise InvalidIdentifier("user name", value)
    if resolve:
        try:
            getpwnam(name)
        except KeyError as exc:
            raise InvalidIdentifier("user (not in passwd)", value) from exc
    return name


def uid_of(user: str | None) -> int | None:
    """The uid of a passwd user, None for no name or a name unknown here:
    used to tell which processes and files are a job's owner's, never to
    authorise anything."""
    if not user:
        return None
    try:
        return int(pwd.getpwnam(user).pw_uid)
    except KeyError:
        return None


def user_name_of(uid: int) -> str:
    """The passwd name of ``uid``, or the number as text when passwd has
    none (a process of a user only the node's NSS cache knew)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def check_job_id(value: Any) -> str:
    return _check(_JOB_RE, "job id", value)


def check_node(value: Any) -> str:
    return _check(_NODE_RE, "node name", value)


def check_token(value: Any, what: str = "token") -> str:
    return _check(_TOKEN_RE, what, value)
