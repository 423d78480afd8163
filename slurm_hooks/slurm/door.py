"""The one door to Slurm: every change slurm-hooks makes to Slurm goes here.

Drain, resume and reason updates of nodes; signal, requeue, cancel and
comments of jobs; maintenance reservations.  The engine, the prolog, the bridge and lending all call
this module and nothing else that writes, so the safety rules live once:

* **Ownership** (``core/ownership.py``, one rule): a node's reason is OURS,
  FOREIGN, STALE or NONE.  A FOREIGN reason (an admin's, ``NHC:``,
  ``slurm-operator:``, Slurm's own) is never overwritten and never lifted;
  a STALE one (left by Slurm 24.11 on a resumed node) claims nothing and
  does not stop a drain.  Slurm has no compare-and-set on reasons, so each
  write reads the node first (one node, not the table: ``get_node``); the
  window is one call.  A caller that judged the node from a table it read
  earlier (the engine's decision) passes the reason it saw as ``expect``:
  the door's own read must still show it, else ReasonChanged and no write.
* **Requeue exactly once**: a job whose restart count moved past the one we
  recorded before touching it was requeued already (by us before a crash,
  by Slurm, by its owner) and is never requeued again.
* **Typed refusals**: the backends raise JobGone, NotRequeueable,
  NodeNotFound (``slurm/refusals.py``); callers catch those types, never
  Slurm's words.

Reads (``get_node``, ``get_job``, ``jobs_on_node``) stay on the client.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from slurm_hooks.core.errors import (
    ForeignReasonError,
    ReasonChanged,
    SignalMaybeSent,
    SlurmError,
    SlurmUnavailable,
)
from slurm_hooks.core.held import comment_is_ours, parse_mark
from slurm_hooks.core.model import JobInfo, NodeState, ReasonOwner
from slurm_hooks.core.ownership import Ownership, effective_owner, node_ownership, reason_counts
from slurm_hooks.core.reason import DrainReason, try_parse_reason
from slurm_hooks.slurm.base import (
    JobsSignal,
    NodeComments,
    NodeReboot,
    Reservations,
    SignalTarget,
    SlurmClient,
)
from slurm_hooks.slurm.reservation import create_argv, delete_argv, list_argv, names_in

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeView:
    """A node as read just now, with what its reason means for us."""

    node: NodeState
    ownership: Ownership

    @classmethod
    def of(cls, node: NodeState) -> NodeView:
        return cls(node, node_ownership(node))

    @property
    def ours(self) -> DrainReason | None:
        """Our reason, only when it holds the node (never a stale one)."""
        return try_parse_reason(self.node.reason) if self.ownership is Ownership.OURS else None

    @property
    def owner(self) -> ReasonOwner:
        """Who holds the node out of service (NONE for no or a stale reason)."""
        return effective_owner(self.node)

    @property
    def out_of_service(self) -> bool:
        """DRAIN, DOWN or FAIL: the states under which a reason counts."""
        return reason_counts(self.node.state, self.node.flags)


class Unset(enum.Enum):
    """No ``expect`` given (None is a value: "the node had no reason")."""

    UNSET = "unset"


UNSET = Unset.UNSET


class Requeue(enum.StrEnum):
    """What ``requeue_once`` did."""

    REQUEUED = "requeued"
    #: The restart count had moved already: not requeued a second time.
    ALREADY = "already"


class SlurmDoor:
    """Guarded writes over any SlurmClient (cli, rest, pyslurm, a test fake)."""

    def __init__(self, client: SlurmClient) -> None:
        self.client = client

    # -- nodes ------------------------------------------------------------------

    def look(self, name: str) -> NodeView:
        """Read ``name`` and judge its reason (the read before a write)."""
        return NodeView.of(self.client.get_node(name))

    def drain(
        self,
        name: str,
        reason: str,
        *,
        over_ours: bool = True,
        foreign_prefixes: Sequence[str] = (),
        expect: str | None | Unset = UNSET,
    ) -> NodeView:
        """Take ``name`` out of service with ``reason`` (one of ours).

        NONE or STALE: drained.  OURS (our drain, a LEND or SPARE hold, an
        earlier incident): the reason is replaced and the node stays out of
        service; the same reason again writes nothing; with ``over_ours``
        False, ReasonChanged instead (lending never relabels a fault).
        FOREIGN: ForeignReasonError and no write, unless it starts with one
        of ``foreign_prefixes``: foreign reasons the caller proved it caused
        (the bridge on Slinky: the ``slurm-operator:`` drain its own pod move
        triggered), replaced by ``reason``.  ``expect``: the reason (None:
        none) the caller judged from an earlier read; ReasonChanged, and no
        write, when the node carries another one now.  Returns the node as
        read before writing."""
        if try_parse_reason(reason) is None:
            raise SlurmError(f"refusing to drain {name} with a reason that is not ours: {reason!r}")
        view = self.look(name)
        if not isinstance(expect, Unset) and view.node.reason != expect:
            raise ReasonChanged(name, expect, view.node.reason)
        adopt = bool(
            view.node.reason and any(view.node.reason.startswith(p) for p in foreign_prefixes if p)
        )
        if view.ownership is Ownership.FOREIGN and adopt:
            log.info("drain node=%s over foreign reason %r we caused", name, view.node.reason)
            self.client.drain(name, reason)
            return view
        if view.ownership is Ownership.FOREIGN:
            raise ForeignReasonError(
                f"node {name} already has a {view.owner.value} reason {view.node.reason!r} "
                f"(set by {view.node.reason_user or '?'}); not touching it"
            )
        if view.ownership is Ownership.OURS:
            if not over_ours and view.node.reason != reason:
                raise ReasonChanged(name, None, view.node.reason)
            if view.node.reason != reason:
                self.client.update_reason(name, reason)
        else:
            if view.ownership is Ownership.STALE:
                log.info("drain node=%s over stale reason %r", name, view.node.reason)
            self.client.drain(name, reason)
        return view

    def resume(
        self,
        name: str,
        *,
        owned: Callable[[DrainReason], bool] | None = None,
        expect_reason: str | None = None,
        foreign_prefixes: Sequence[str] = (),
    ) -> bool:
        """Return ``name`` to service if the reason holding it is ours (and
        ``owned`` accepts it: this incident, this code).  False when the node
        is in service already (nothing to resume).

        ``expect_reason``: the reason the caller judged; ReasonChanged when
        the node carries another one now.  ``foreign_prefixes``: foreign
        reasons a site declared ours to lift (the bridge's spare pool).
        Anything else is ForeignReasonError: an admin's drain is never
        lifted by us."""
        view = self.look(name)
        node = view.node
        if expect_reason is not None and node.reason != expect_reason:
            raise ReasonChanged(name, expect_reason, node.reason)
        if not view.out_of_service:
            return False
        ours = view.ours
        if ours is not None:
            if owned is not None and not owned(ours):
                raise ForeignReasonError(
                    f"node {name} carries our {ours.code} reason of incident {ours.incident}, "
                    "not the one this caller owns; not resuming"
                )
        elif not (node.reason and any(node.reason.startswith(p) for p in foreign_prefixes if p)):
            raise ForeignReasonError(
                f"node {name} is {node.state}+{'+'.join(sorted(node.flags))} with a "
                f"{view.owner.value} reason {node.reason!r}; only its owner may resume it"
            )
        self.client.resume(name)
        return True

    def take_back(self, name: str, claim: str, *, restore: str | None = None) -> bool:
        """Withdraw our own breaker claim (``act/claim.py``): only while the
        node still carries exactly ``claim``; anything else (an admin's
        reason, a later drain of ours) is left as it is.  ``restore``: the
        LEND/SPARE reason the claim was written over, put back instead of
        resuming.  True when the claim was withdrawn."""
        view = self.look(name)
        if view.node.reason != claim or view.ownership is not Ownership.OURS:
            log.info("take back node=%s: reason is %r now, not our claim; left", name,
                     view.node.reason)  # fmt: skip
            return False
        if restore is not None and try_parse_reason(restore) is not None:
            self.client.update_reason(name, restore)
        else:
            self.client.resume(name)
        return True

    def reboot(self, name: str, reason: str, *, incident: str, nextstate: str = "DOWN") -> bool:
        """Ask Slurm to reboot ``name`` (``act/repair.py``), only while it is
        held by our reason of ``incident``: never a node an admin took, never
        one of another incident.  ``reason`` (ours) is written with it.
        False when the client cannot reboot nodes (REST, a test fake)."""
        if try_parse_reason(reason) is None:
            raise SlurmError(
                f"refusing to reboot {name} with a reason that is not ours: {reason!r}"
            )
        view = self.look(name)
        ours = view.ours
        if ours is None or ours.incident != incident:
            raise ForeignReasonError(
                f"node {name} is not held by our incident {incident} (reason "
                f"{view.node.reason!r}); not rebooting it"
            )
        if not isinstance(self.client, NodeReboot):
            return False
        self.client.reboot(name, reason, nextstate)
        return True

    def mark_held(self, name: str, mark: str, *, node: NodeState | None = None) -> bool:
        """Write our held mark (``core/held.py``) into the node's Comment.
        Never over someone else's comment: False then (and when the client
        cannot write comments).  ``node``: the node as just read, to save a
        call."""
        if parse_mark(mark) is None:
            raise SlurmError(f"not a held mark: {mark!r}")
        node = node if node is not None else self.client.get_node(name)
        if node.comment == mark:
            return True
        if not comment_is_ours(node.comment) or not isinstance(self.client, NodeComments):
            return False
        self.client.set_node_comment(name, mark)
        return True

    def clear_held(self, name: str, *, node: NodeState | None = None) -> bool:
        """Clear our held mark from the node's Comment (never anyone else's)."""
        node = node if node is not None else self.client.get_node(name)
        if parse_mark(node.comment) is None or not isinstance(self.client, NodeComments):
            return False
        self.client.set_node_comment(name, "")
        return True

    # -- jobs -------------------------------------------------------------------

    def signal(self, job_id: str, signal: str, target: SignalTarget) -> None:
        """Signal a job (JobGone when it ended or was purged)."""
        self.client.signal_job(job_id, signal, target)

    def signal_many(
        self, job_ids: Sequence[str], signal: str, target: SignalTarget
    ) -> dict[str, SlurmError | None]:
        """Signal every job in ``job_ids``; each job's outcome: None (sent)
        or its typed error (JobGone for a job that ended).

        A client that signals many jobs in one request (``JobsSignal``: the
        CLI's one ``scancel --ctld``, which reads the job table once for all
        of them up to Slurm 23.11 and not at all from 24.05) gets one call;
        any other (REST, pyslurm, a test double) one ``signal_job`` per job.
        SlurmUnavailable is raised only when nothing was sent; once the
        controller stops answering part-way, the jobs not reached carry
        SlurmUnavailable as their outcome (no retry per remaining job: each
        would wait out the client's whole retry budget), and a job whose
        request may have reached it SignalMaybeSent (never sent again)."""
        ids = list(dict.fromkeys(job_ids))
        if not ids:
            return {}
        if isinstance(self.client, JobsSignal):
            return self.client.signal_jobs(ids, signal, target)
        out: dict[str, SlurmError | None] = {}
        for i, job_id in enumerate(ids):
            try:
                self.signal(job_id, signal, target)
            except SignalMaybeSent as exc:
                # It may still be delivered: its own outcome, never resent;
                # the jobs after it are not asked.
                out[job_id] = exc
                out.update(dict.fromkeys(ids[i + 1 :], SlurmUnavailable(f"not sent: {exc}")))
                break
            except SlurmUnavailable as exc:
                if i == 0:
                    raise
                out.update(dict.fromkeys(ids[i:], exc))
                break
            except SlurmError as exc:
                out[job_id] = exc
            else:
                out[job_id] = None
        return out

    @staticmethod
    def requeued_since(job: JobInfo, restarts_before: int) -> bool:
        """True when ``job`` was requeued after we saw it with
        ``restarts_before`` restarts: the exactly-once rule."""
        return job.restart_count > restarts_before

    def requeue_once(
        self, job_id: str, restarts_before: int, *, job: JobInfo | None = None
    ) -> Requeue:
        """Requeue ``job_id`` unless its restart count already moved past
        ``restarts_before`` (the count recorded before we touched it).
        ``job`` is the job as just read, to save a call.  Raises JobGone,
        NotRequeueable (``--no-requeue``, an interactive job) from Slurm."""
        job = job if job is not None else self.client.get_job(job_id)
        if self.requeued_since(job, restarts_before):
            log.info("job %s already requeued (restarts %d)", job_id, job.restart_count)
            return Requeue.ALREADY
        self.client.requeue(job_id)
        return Requeue.REQUEUED

    def cancel(self, job_id: str) -> None:
        self.client.cancel(job_id)

    def comment(self, job_id: str, comment: str, *, admin: bool = False) -> None:
        """Note on the job (Comment, or AdminComment with ``admin``)."""
        self.client.set_job_comment(job_id, comment, admin=admin)

    # -- maintenance reservations ---------------------------------------------------

    @staticmethod
    def create_reservation(name: str, node: str, minutes: int, *, timeout: float = 30) -> None:
        """A MAINT reservation ``name`` on ``node`` (``slurm/reservation.py``);
        SlurmError when Slurm refuses it."""
        SlurmDoor._scontrol(create_argv(name, node, minutes), timeout, f"create reservation {name}")

    @staticmethod
    def delete_reservation(name: str, *, timeout: float = 30) -> None:
        SlurmDoor._scontrol(delete_argv(name), timeout, f"delete reservation {name}")

    def _reservations(self) -> Reservations:
        """The client where it makes reservations itself (its SLURM_CONF),
        else ``scontrol`` as this process finds it."""
        return self.client if isinstance(self.client, Reservations) else _ScontrolReservations()

    def reservations(self) -> set[str]:
        """The names of the reservations slurmctld has now (a read, here
        because only the reservation writes below need it)."""
        return self._reservations().reservation_names()

    def ensure_reservation(self, name: str, node: str, minutes: int) -> bool:
        """A MAINT reservation ``name`` on ``node`` unless it exists already
        (a step repeated after a crash); True when it was made now."""
        r = self._reservations()
        if name in r.reservation_names():
            return False
        r.create_reservation(name, node, minutes)
        return True

    def drop_reservation(self, name: str) -> bool:
        """Delete reservation ``name`` if it exists (it may have ended, or
        been deleted before a crash); True when it was deleted now."""
        r = self._reservations()
        if name not in r.reservation_names():
            return False
        r.delete_reservation(name)
        return True

    @staticmethod
    def _scontrol(argv: list[str], timeout: float, what: str) -> str:
        """Run ``argv``; its output, or SlurmError naming ``what``."""
        from slurm_hooks.core.errors import CommandError
        from slurm_hooks.detect.probes.commands import run

        try:
            return run(argv, timeout=timeout).stdout
        except CommandError as exc:
            raise SlurmError(f"cannot {what}: {exc}") from exc

    # -- scheduler-visible health -------------------------------------------------

    def set_extra(self, name: str, key: str, value: str, *, node: NodeState | None = None) -> bool:
        """Set our ``key=value`` in the node's ``Extra`` (``core/extra.py``),
        where ``sinfo -O NodeList,Extra`` shows it.  The slot is shared: a JSON
        object or ``k=v`` list someone else wrote keeps its other entries, free
        text is theirs and is left alone (False, no write).  False also when
        the client cannot write Extra.  The same value again writes nothing.
        Slurm refusing the field (a release without it) is a SlurmError."""
        from slurm_hooks.core.extra import merge_extra
        from slurm_hooks.slurm.base import NodeExtra

        if not isinstance(self.client, NodeExtra):
            return False
        node = node if node is not None else self.client.get_node(name)
        merged = merge_extra(node.extra, key, value)
        if merged.value is None:
            log.info("extra node=%s: %r is not ours to merge; %s not written", name, node.extra,
                     key)  # fmt: skip
            return False
        if merged.changed:
            self.client.set_node_extra(name, merged.value)
        return True


class _ScontrolReservations:
    """``slurm.base.Reservations`` through ``scontrol`` as this process finds
    it, for the clients with no Slurm set-up of their own (REST, pyslurm)."""

    def reservation_names(self) -> set[str]:
        return names_in(SlurmDoor._scontrol(list_argv(), 30, "list reservations"))

    def create_reservation(self, name: str, node: str, minutes: int) -> None:
        SlurmDoor.create_reservation(name, node, minutes)

    def delete_reservation(self, name: str) -> None:
        SlurmDoor.delete_reservation(name)
