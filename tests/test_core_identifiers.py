"""core/identifiers.py: the owner's uid that the progress watcher and
``slurm-hooks job`` look processes up by."""

from __future__ import annotations

import os
import pwd

from slurm_hooks.core.identifiers import uid_of


def test_uid_of_a_passwd_user_is_its_uid() -> None:
    me = pwd.getpwuid(os.getuid())
    assert uid_of(me.pw_name) == me.pw_uid


def test_uid_of_no_name_or_an_unknown_name_is_none() -> None:
    assert uid_of(None) is None
    assert uid_of("") is None
    assert uid_of("no-such-user-slurm-hooks") is None
