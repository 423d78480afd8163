"""The torch all-reduce check's ranks meet where no user of the node can reach.

Before, they met at a TCP store on 127.0.0.1 (``tcp://127.0.0.1:<port>``):
the store has no authentication, so any user of the node could connect and
write the keys the ranks exchange, or take the port first, and the root-run
check would fail or hang: a drain on what a user did.  They now meet at a
file in a fresh 0700 directory of root's (``private_rendezvous``)."""

from __future__ import annotations

import os
import queue as queue_mod
import stat
import subprocess
from types import SimpleNamespace
from typing import Any

import pytest
from slurm_hooks_lab.lab import TEST_USER, ensure_user

from slurm_hooks.detect.engines.nccl.engines import (
    TorchNcclConfig,
    private_rendezvous,
    run_torch_all_reduce,
)


def test_the_ranks_meet_at_a_file_in_a_directory_only_its_owner_can_enter():
    with private_rendezvous() as url:
        assert url.startswith("file://")
        path = url.removeprefix("file://")
        where = os.stat(os.path.dirname(path))
        assert stat.S_IMODE(where.st_mode) == 0o700
        assert where.st_uid == os.geteuid()
        assert not os.path.exists(path)  # torch's FileStore makes it, fresh
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_another_user_can_neither_make_nor_read_the_store():
    """The hostile user for real: an unprivileged account tries to plant the
    store file before the ranks make it, and to read one they made."""
    ensure_user(TEST_USER)
    with private_rendezvous() as url:
        path = url.removeprefix("file://")
        plant = subprocess.run(
            ["runuser", "-u", TEST_USER, "--", "touch", "--", path],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert plant.returncode != 0 and "Permission denied" in plant.stderr
        assert not os.path.exists(path)
        with open(path, "w") as f:  # as the ranks would
            f.write("keys")
        peek = subprocess.run(
            ["runuser", "-u", TEST_USER, "--", "cat", "--", path],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert peek.returncode != 0 and "Permission denied" in peek.stderr
        assert "keys" not in peek.stdout


#: Just enough torch for the engine to choose its GPUs (two).
_TORCH = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True, device_count=lambda: 2))


class _Ctx:
    """multiprocessing's spawn context, as far as the engine uses it: each
    rank's arguments are kept, rank 0 'answers' with one timing."""

    def __init__(self) -> None:
        self.started: list[tuple[Any, ...]] = []
        self.store_seen: list[bool] = []
        self.answers: list[tuple[str, Any]] = []

    def Queue(self):  # noqa: N802 - multiprocessing's name
        ctx = self

        class _Q:
            def get(self, timeout=None):
                if ctx.answers:
                    return ctx.answers.pop(0)
                raise queue_mod.Empty

            def empty(self):
                return not ctx.answers

        return _Q()

    def Process(self, target, args, daemon):  # noqa: N802 - multiprocessing's name
        ctx = self

        class _P:
            exitcode = 0

            def start(self):
                ctx.started.append(args)
                store = args[2]
                ctx.store_seen.append(os.path.isdir(os.path.dirname(store.removeprefix("file://"))))
                if args[0] == 0:
                    ctx.answers.append(("ok", [(32 * 1024**2, 0.001, 0)]))

            def is_alive(self):
                return False

            def join(self, timeout=None):
                pass

            def kill(self):
                pass

        return _P()


def test_the_torch_check_hands_every_rank_the_private_file_and_removes_it(monkeypatch):
    import multiprocessing

    ctx = _Ctx()
    monkeypatch.setattr(multiprocessing, "get_context", lambda method: ctx)
    run = run_torch_all_reduce(TorchNcclConfig(timeout_s=5), torch_module=_TORCH)
    assert run.completed and run.nranks == 2
    stores = {args[2] for args in ctx.started}
    assert len(stores) == 1  # one meeting place for both ranks
    (store,) = stores
    assert store.startswith("file://") and "127.0.0.1" not in store
    assert ctx.store_seen == [True, True]  # there while the ranks run ...
    assert not os.path.exists(os.path.dirname(store.removeprefix("file://")))  # ... gone after
