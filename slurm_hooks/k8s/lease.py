"""Leader election through a ``coordination.k8s.io/v1`` Lease.

The same protocol as client-go's leaderelection: a replica holds the lease
while it renews ``renewTime`` within ``leaseDurationSeconds``; another takes
it over only after that has lapsed.  Every write carries the resourceVersion
that was read, so of two replicas racing for the lease exactly one write
succeeds and the other gets 409 and stays a follower.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from slurm_hooks.core.clock import parse_time
from slurm_hooks.core.errors import ConflictError, KubernetesError
from slurm_hooks.k8s.client import KubeClient, lease_path

log = logging.getLogger(__name__)


def _micro(when: datetime) -> str:
    """metav1.MicroTime."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        duration: int = 30,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self.is_leader = False
        #: When we last wrote the lease successfully (our own clock).
        self.renewed_at: datetime | None = None

    def try_acquire(self) -> bool:
        """Acquire or renew; True while we are the leader.  API errors make
        us a follower for this round (never two leaders on doubt)."""
        try:
            started = self.clock()
            self.is_leader = self._try()
            if self.is_leader:
                self.renewed_at = started
        except ConflictError:
            log.info("lease %s/%s: lost a race, following", self.namespace, self.name)
            self.is_leader = False
        except KubernetesError as exc:
            log.warning("lease %s/%s: %s; following this round", self.namespace, self.name, exc)
            self.is_leader = False
        return self.is_leader

    def _try(self) -> bool:
        now = self.clock()
        path = lease_path(self.namespace, self.name)
        try:
            lease = self.client.get(path)
        except KubernetesError as exc:
            if exc.status != 404:
                raise
            self.client.create(
                lease_path(self.namespace),
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {
                        "holderIdentity": self.identity,
                        "leaseDurationSeconds": self.duration,
                        "acquireTime": _micro(now),
                        "renewTime": _micro(now),
                        "leaseTransitions": 0,
                    },
                },
            )
            log.info(
                "lease %s/%s: created, leading as %s", self.namespace, self.name, self.identity
            )
            return True
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = int(spec.get("leaseDurationSeconds") or self.duration)
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            spec["acquireTime"] = _micro(now)
            log.info("lease %s/%s: taking over from %r", self.namespace, self.name, holder)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.duration,
            renewTime=_micro(now),
        )
        lease["spec"] = spec
        self.client.replace(path, lease)  # carries metadata.resourceVersion: 409 if raced
        return True

    def holds(self) -> bool:
        """True while the lease we last wrote is surely still ours: within
        two thirds of its duration (client-go's renew deadline).  Past that,
        another replica may have taken over: renew before acting again."""
        if not self.is_leader or self.renewed_at is None:
            return False
        return (self.clock() - self.renewed_at).total_seconds() < self.duration * 2 / 3

    def release(self) -> None:
        """Give the lease up on a clean shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        path = lease_path(self.namespace, self.name)
        try:
            lease = self.client.get(path)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["renewTime"] = None
                self.client.replace(path, lease)
        except KubernetesError as exc:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
        self.is_leader = False
