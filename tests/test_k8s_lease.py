"""Leader election through a coordination.k8s.io/v1 Lease, on the stand-in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from slurm_hooks_lab.k8s_standin import StandinServer

from slurm_hooks.k8s import client as C
from slurm_hooks.k8s.client import KubeClient
from slurm_hooks.k8s.lease import LeaderElector


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def api():
    with StandinServer() as server:
        yield server


def elector(api, ident, clock, duration=15):
    return LeaderElector(KubeClient(api.url, retries=0), "ns", "bridge", ident, duration, clock)


def test_one_leader_then_takeover_after_expiry(api):
    clock = Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire() is True
    assert b.try_acquire() is False
    lease = api.get("leases", "bridge", "ns")
    assert lease["spec"]["holderIdentity"] == "a" and lease["spec"]["leaseTransitions"] == 0
    assert lease["spec"]["renewTime"].endswith("Z")

    clock.now += timedelta(seconds=10)
    assert a.try_acquire() is True  # renew
    clock.now += timedelta(seconds=10)
    assert b.try_acquire() is False  # renewed 10 s ago: still valid
    clock.now += timedelta(seconds=30)
    assert b.try_acquire() is True  # a stopped renewing
    lease = api.get("leases", "bridge", "ns")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    assert a.try_acquire() is False


def test_racing_takeover_only_one_wins(api):
    clock = Clock()
    elector(api, "old", clock).try_acquire()
    clock.now += timedelta(seconds=60)
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    # both read the expired lease, then write with the same resourceVersion
    lease = a.client.get(C.lease_path("ns", "bridge"))
    a_first = a.try_acquire()
    orig_get = b.client.get
    b.client.get = lambda path: lease  # b acts on the stale read
    b_second = b.try_acquire()
    b.client.get = orig_get
    assert (a_first, b_second) == (True, False)
    assert api.get("leases", "bridge", "ns")["spec"]["holderIdentity"] == "a"


def test_release_lets_another_take_over_at_once(api):
    clock = Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert a.try_acquire()
    a.release()
    assert b.try_acquire()


def test_api_error_means_follower(api):
    clock = Clock()
    a = elector(api, "a", clock)
    api.fail_next(1, 500)
    assert a.try_acquire() is False
    assert a.try_acquire() is True
