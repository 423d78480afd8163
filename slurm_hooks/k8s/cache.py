"""A collection kept current by one paged LIST and then watches.

Why: at 50,000 Nodes, a paged LIST every pass decodes ~35 MB of JSON and
builds 50,000 views only to find, most passes, that nothing changed.  After
one LIST the collection's resourceVersion says where it stood; each
``refresh()`` then reads only the changes since (a watch from that version,
which the server ends after ``watch_seconds``), so a quiet pass costs one
call and no decoding.

Synchronous on purpose (no informer thread): the caller's pass sees every
change made before ``refresh()`` was called, as with a LIST, and nothing
changes under it while it plans.  The price is ``watch_seconds`` of waiting
(no CPU) per refresh, the shortest a real server's ``timeoutSeconds``
allows.

A version the server no longer has (410 Expired, compaction) or any other
failed watch lists again from scratch: never a partial view.  A watch the
caller's RBAC role does not grant (403) is logged once and not tried again:
the list then works as a LIST every refresh.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from slurm_hooks.core.errors import KubernetesError
from slurm_hooks.k8s.client import ItemView, KubeClient, Obj

log = logging.getLogger(__name__)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Cyclic garbage collection off while a LIST builds its items.

    Why: a 50,000-node LIST builds ~250,000 tracked containers that all
    live until the next LIST, and every young collection promotes them
    while the full collections it triggers re-scan the growing heap: that
    was ~0.5 s of a 1.5 s cold pass (bench/bench_bridge.py), to free
    nothing (the items are acyclic and the page buffers go by reference
    count).  Afterwards (if collection was on) one collection of the two
    young generations moves the new items to the old one in a single sweep
    (left alone, a young and then a middle collection sweep them twice)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.collect(1)
            gc.enable()


def _key(obj: Obj) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return str(md.get("namespace") or ""), str(md.get("name") or "")


class WatchedList:
    """Items of one collection by (namespace, name), LIST then watches."""

    def __init__(
        self,
        kube: KubeClient,
        path: str,
        *,
        label_selector: str | None = None,
        page: int = 500,
        item_view: Callable[[Obj], Obj] | ItemView | None = None,
        watch_seconds: int = 1,
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.page = page
        self.item_view = item_view
        self.watch_seconds = watch_seconds
        self.items: dict[tuple[str, str], Obj] = {}
        #: Where the cache stands; None: the next refresh lists.
        self.resource_version: str | None = None
        #: LISTs and watches done (tests and the benchmark read them).
        self.lists = 0
        self.watches = 0
        #: The server refused the watch verb (403): LIST every refresh.
        self.watch_refused = False

    def invalidate(self) -> None:
        """The next refresh lists from scratch; the items are let go now
        (a dict returned by ``refresh`` stays the caller's)."""
        self.resource_version = None
        self.items = {}

    def refresh(self) -> dict[tuple[str, str], Obj]:
        """The collection as it is now: a LIST the first time (or after a
        failed watch), the changes since the last refresh otherwise."""
        if self.resource_version is not None and not self.watch_refused:
            try:
                self._watch(self.resource_version)
                return self.items
            except KubernetesError as exc:
                if exc.status == 410:
                    log.info("WATCH %s: version too old (410), listing again", self.path)
                elif exc.status in (401, 403):
                    self.watch_refused = True
                    log.warning(
                        "WATCH %s refused (%s): listing every time from now on;"
                        " grant the watch verb to use watches",
                        self.path,
                        exc,
                    )
                else:
                    log.warning("WATCH %s failed (%s), listing again", self.path, exc)
                self.resource_version = None
        self._list()
        return self.items

    def _list(self) -> None:
        # Let the old items go first: two full lists alive at once was
        # +90 MB of peak RSS at 50,000 nodes.
        self.items = {}
        with gc_paused():
            doc = self.kube.list(
                self.path,
                label_selector=self.label_selector,
                limit=self.page,
                item_view=self.item_view,
            )
            self.lists += 1
            self.items = {
                (md.get("namespace") or "", md["name"]): o  # inlined: 50,000 items
                for o in doc.get("items") or []
                for md in (o["metadata"],)
            }
        rv = (doc.get("metadata") or {}).get("resourceVersion")
        self.resource_version = str(rv) if rv else None

    def _watch(self, since: str) -> None:
        """Apply every event after ``since``; the version only moves once
        the stream ended cleanly (an error part-way lists again anyway)."""
        self.watches += 1
        changes: list[tuple[str, Any]] = []
        rv = since
        for kind, obj in self.kube.watch(
            self.path,
            since,
            label_selector=self.label_selector,
            timeout_seconds=self.watch_seconds,
            item_view=self.item_view,
        ):
            new_rv = (obj.get("metadata") or {}).get("resourceVersion")
            if new_rv:
                rv = str(new_rv)
            if kind != "BOOKMARK":
                changes.append((kind, obj))
        for kind, obj in changes:
            if kind == "DELETED":
                self.items.pop(_key(obj), None)
            else:
                self.items[_key(obj)] = obj
        self.resource_version = rv
