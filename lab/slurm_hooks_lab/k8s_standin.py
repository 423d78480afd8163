"""A loopback stand-in for the Kubernetes API server.

No API server can run on a test machine here, so this module reproduces the
parts of its behaviour that the bridge depends on, over real HTTP:

* paths: core ``/api/v1`` (nodes, pods, namespaced pods, the pods/eviction
  subresource, configmaps) and ``/apis/<group>/<version>`` for leases, PDBs, Cluster API
  Machines and our NodeReplacement resource;
* verbs: GET, LIST with labelSelector/fieldSelector, POST (201, or 409
  AlreadyExists), PUT (409 Conflict on a stale resourceVersion), PATCH with
  merge (RFC 7386), strategic merge (built-in kinds only, 415 for custom
  resources, as the real server) and JSON patch (RFC 6902, including
  ``test``), DELETE; any other patch content type gets 415;
* a global resourceVersion bumped on every write, uid and creationTimestamp
  on create, a resourceVersion inside a patch acting as a precondition;
* Status objects (kind/apiVersion/metadata/status/message/reason/details/code)
  for every error: 401 Unauthorized with a bearer token configured, 404
  NotFound, 405, 409, 415, 422, 429 from the Eviction API when a
  PodDisruptionBudget would be violated (disruptionsAllowed computed from
  minAvailable/maxUnavailable and the matching healthy pods);
* fault injection: the next N matching calls answer 5xx (or any code), and
  an optional delay per call;
* watches (``?watch=1&resourceVersion=RV``): every change after RV as JSON
  lines (``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": ...}``) in a
  chunked answer that ends after ``timeoutSeconds``; label and field
  selectors apply to the object before and after each change (an object
  that stops matching is DELETED for the watcher, one that starts matching
  is ADDED); ``allowWatchBookmarks`` adds a BOOKMARK carrying the current
  resourceVersion before the answer ends; a resourceVersion older than the
  retained history (``Store.history`` changes) is an ERROR event with a 410
  Expired Status, as a compacted one is on a real server; resourceVersion
  "0" or none starts with an ADDED event per existing object.

The demo and ``slurm-hooks lab k8s-standin`` (for trying the bridge)
run it.  State lives in memory only.
"""

from __future__ import annotations

import base64
import bisect
import collections
import copy
import json
import logging
import math
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from slurm_hooks.k8s.selectors import (
    field_selector_matches,
    label_selector_matches,
    selector_object_matches,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str  # "" for core
    version: str
    plural: str
    kind: str
    namespaced: bool
    builtin: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES = [
    Resource("", "v1", "nodes", "Node", False),
    Resource("", "v1", "pods", "Pod", True),
    Resource("", "v1", "namespaces", "Namespace", False),
    Resource("", "v1", "configmaps", "ConfigMap", True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True),
    Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    Resource("cluster.x-k8s.io", "v1beta1", "machines", "Machine", True, builtin=False),
    Resource("slurm-hooks.io", "v1alpha1", "nodereplacements", "NodeReplacement", True, False),
    # Slinky's NodeSet (config/crd/bases/slinky.slurm.net_nodesets.yaml);
    # lab/slurm_hooks_lab/nodeset_controller.py plays its controller.
    Resource("slinky.slurm.net", "v1beta1", "nodesets", "NodeSet", True, builtin=False),
]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"

#: Strategic merge keys of the built-in lists we serve.  Lists not named here
#: (Node spec.taints is ``listType=atomic``, for example) are replaced whole.
SMP_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details


def status_object(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    out: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        out["details"] = details
    return out


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- patches ----------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any, key: str | None = None) -> Any:
    """Strategic merge for the lists in SMP_MERGE_KEYS; ``$patch: delete``
    removes a list element; other lists are replaced, maps merged."""
    if isinstance(patch, list):
        mkey = SMP_MERGE_KEYS.get(key or "")
        if not mkey or not isinstance(target, list):
            return [p for p in copy.deepcopy(patch) if not (isinstance(p, dict) and "$patch" in p)]
        out = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or mkey not in item:
                raise ApiError(422, "Invalid", f"list element of {key} lacks {mkey}")
            idx = next((i for i, e in enumerate(out) if e.get(mkey) == item[mkey]), None)
            if item.get("$patch") == "delete":
                if idx is not None:
                    out.pop(idx)
            elif idx is None:
                out.append(copy.deepcopy(item))
            else:
                out[idx] = strategic_merge_patch(out[idx], item)
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = strategic_merge_patch(out.get(k), v, k)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        try:
            kind = op["op"]
            parts = _pointer(op["path"])
            if kind == "test":
                if _walk(doc, parts) != op["value"]:
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request: test failed at {op['path']}",
                    )
                continue
            if kind in ("move", "copy"):
                value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
                if kind == "move":
                    doc = json_patch(doc, [{"op": "remove", "path": op["from"]}])
                kind, op = "add", {"op": "add", "path": op["path"], "value": value}
            parent = _walk(doc, parts[:-1]) if parts else None
            last = parts[-1] if parts else None
            if kind == "add":
                if parent is None:
                    doc = copy.deepcopy(op["value"])
                elif isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)  # type: ignore[arg-type]
                    if idx > len(parent):
                        raise IndexError(idx)
                    parent.insert(idx, copy.deepcopy(op["value"]))
                else:
                    parent[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                if isinstance(parent, list):
                    parent.pop(int(last))  # type: ignore[arg-type]
                else:
                    del parent[last]
            elif kind == "replace":
                if parent is None:
                    doc = copy.deepcopy(op["value"])
                elif isinstance(parent, list):
                    parent[int(last)] = copy.deepcopy(op["value"])  # type: ignore[arg-type]
                else:
                    if last not in parent:
                        raise KeyError(last)
                    parent[last] = copy.deepcopy(op["value"])
            else:
                raise ApiError(400, "BadRequest", f"unknown json patch op {kind!r}")
        except ApiError:
            raise
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422, "Invalid", f"the server rejected our request: {op!r}: {exc!r}"
            ) from exc
    return doc


# -- the server -------------------------------------------------------------


class Store:
    """The API's objects and their semantics, independent of HTTP."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: Woken on every change (watches wait on it).
        self.changed = threading.Condition(self.lock)
        self.rv = 1000
        #: The changes a watch can resume from: (rv, qualified, ns, old, new),
        #: old None for a creation, new None for a deletion.  Stored objects are
        #: never mutated after a write, so references are kept, not copies.
        self.events: collections.deque[tuple[int, str, str, Obj | None, Obj | None]] = (
            collections.deque(maxlen=10_000)
        )
        #: The newest resourceVersion dropped from ``events``: a watch from
        #: before it is 410 Expired.
        self.compacted = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (qualified, ns, name)
        #: (namespace, labels) of evicted pods that a controller owned: the
        #: controller's scale still counts them in a PDB's expectedPods.
        self.evicted_owned: list[tuple[str, dict[str, str]]] = []

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, qualified: str, ns: str, old: Obj | None, new: Obj | None) -> None:
        """Remember a change at the current resourceVersion and wake watches."""
        events = self.events
        if events.maxlen is not None and len(events) == events.maxlen:
            self.compacted = events[0][0]
        events.append((self.rv, qualified, ns, old, new))
        self.changed.notify_all()

    def set_history(self, size: int) -> None:
        """Keep only the last ``size`` changes (tests: make a watch expire)."""
        with self.lock:
            kept = list(self.events)[-size:] if size else []
            dropped = len(self.events) - len(kept)
            if dropped:
                self.compacted = max(self.compacted, self.events[dropped - 1][0])
            self.events = collections.deque(kept, maxlen=size)

    def put_object(self, res: Resource, obj: Obj) -> Obj:
        """Create or overwrite without checks (seeding)."""
        with self.lock:
            obj = copy.deepcopy(obj)
            md = obj.setdefault("metadata", {})
            if res.namespaced:
                md.setdefault("namespace", "default")
            md.setdefault("uid", str(uuid.uuid4()))
            md.setdefault("creationTimestamp", _now())
            md["resourceVersion"] = self._bump()
            obj["kind"], obj["apiVersion"] = res.kind, res.api_version
            key = (res.qualified, md.get("namespace", ""), md["name"])
            self._record(res.qualified, key[1], self.objects.get(key), obj)
            self.objects[key] = obj
            return copy.deepcopy(obj)

    def get(self, res: Resource, ns: str, name: str) -> Obj:
        with self.lock:
            obj = self.objects.get((res.qualified, ns, name))
            if obj is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f'{res.qualified} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural},
                )
            if res.plural == "poddisruptionbudgets":
                obj["status"] = self._pdb_status(obj)
            return copy.deepcopy(obj)

    def list(
        self,
        res: Resource,
        ns: str | None,
        labels: str,
        fields: str,
        *,
        limit: int = 0,
        cont: str = "",
    ) -> Obj:
        """A LIST; ``limit``/``cont`` page it as the API server does: items
        in (namespace, name) order, ``metadata.continue`` naming where the
        next page starts (an unreadable token is 410 Expired, as a compacted
        one is on a real server) and ``remainingItemCount``."""
        after: tuple[str, str] | None = None
        if cont:
            try:
                doc = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                after = (str(doc["ns"]), str(doc["name"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiError(
                    410, "Expired", "the provided continue parameter is too old"
                ) from exc
        with self.lock:
            items = []
            keys = sorted(
                (ons, oname)
                for (q, ons, oname) in self.objects
                if q == res.qualified and (ns is None or ons == ns)
            )
            if after is not None:
                keys = keys[bisect.bisect_right(keys, after) :]
            more = ""
            remaining = 0
            last_key = ("", "")
            for pos, (ons, oname) in enumerate(keys):
                obj = self.objects[(res.qualified, ons, oname)]
                if limit and len(items) >= limit:
                    token = {"ns": last_key[0], "name": last_key[1]}
                    more = base64.urlsafe_b64encode(json.dumps(token).encode()).decode()
                    remaining = len(keys) - pos
                    break
                try:
                    if labels and not label_selector_matches(
                        labels, obj["metadata"].get("labels") or {}
                    ):
                        continue
                    if fields and not field_selector_matches(fields, obj):
                        continue
                except ValueError as exc:
                    raise ApiError(400, "BadRequest", str(exc)) from exc
                if res.plural == "poddisruptionbudgets":
                    obj["status"] = self._pdb_status(obj)
                item = copy.deepcopy(obj)
                if res.builtin:  # the server omits kind/apiVersion on built-in list items
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                items.append(item)
                last_key = (ons, oname)
            meta: Obj = {"resourceVersion": str(self.rv)}
            if more:
                meta["continue"] = more
                meta["remainingItemCount"] = remaining
            return {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": meta,
                "items": items,
            }

    def watch_since(
        self, res: Resource, ns: str | None, labels: str, fields: str, since: int
    ) -> tuple[list[tuple[str, Obj]], int]:
        """The watch events of ``res`` after resourceVersion ``since`` (0:
        an ADDED event per existing object first), and the resourceVersion
        they reach.  ApiError 410 when ``since`` is older than the history.
        Call with the lock held."""

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            try:
                if labels and not label_selector_matches(
                    labels, obj["metadata"].get("labels") or {}
                ):
                    return False
                return not fields or field_selector_matches(fields, obj)
            except ValueError as exc:
                raise ApiError(400, "BadRequest", str(exc)) from exc

        def shown(obj: Obj, rv: int | None = None) -> Obj:
            out = copy.deepcopy(obj)
            if rv is not None:  # a deleted object carries the deletion's version
                out["metadata"]["resourceVersion"] = str(rv)
            return out

        out: list[tuple[str, Obj]] = []
        if since == 0:
            for (q, ons, _), obj in sorted(self.objects.items()):
                if q == res.qualified and ns in (None, ons) and matches(obj):
                    out.append(("ADDED", shown(obj)))
            return out, self.rv
        if since < self.compacted:
            raise ApiError(
                410, "Expired", f"too old resource version: {since} ({self.compacted + 1})"
            )
        start = bisect.bisect_right([e[0] for e in self.events], since)
        for rv, q, ons, old, new in list(self.events)[start:]:
            if q != res.qualified or ns not in (None, ons):
                continue
            before, after = matches(old), matches(new)
            if after:
                out.append(("MODIFIED" if before else "ADDED", shown(new)))  # type: ignore[arg-type]
            elif before:
                out.append(("DELETED", shown(old, rv)))  # type: ignore[arg-type]
        return out, self.rv

    def create(self, res: Resource, ns: str, body: Obj) -> Obj:
        with self.lock:
            md = body.get("metadata") or {}
            name = md.get("name")
            if not name and md.get("generateName"):
                name = md["generateName"] + uuid.uuid4().hex[:5]
            if not name:
                raise ApiError(
                    422, "Invalid", f"{res.kind} is invalid: metadata.name: Required value"
                )
            if body.get("kind") not in (None, res.kind):
                raise ApiError(
                    400, "BadRequest", f"kind {body.get('kind')!r} does not match {res.kind}"
                )
            if (res.qualified, ns, name) in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{res.qualified} "{name}" already exists',
                    {"name": name, "group": res.group, "kind": res.plural},
                )
            body = copy.deepcopy(body)
            md = body.setdefault("metadata", {})
            md["name"] = name
            md.pop("resourceVersion", None)
            md["uid"] = str(uuid.uuid4())
            md["creationTimestamp"] = _now()
            md["generation"] = 1
            if res.namespaced:
                md["namespace"] = ns
            return self.put_object(res, body)

    def _conflict(self, res: Resource, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            {"name": name, "group": res.group, "kind": res.plural},
        )

    def _write(self, res: Resource, ns: str, name: str, old: Obj, new: Obj) -> Obj:
        new.setdefault("metadata", {})
        for key in ("uid", "creationTimestamp", "name", "namespace"):
            if key in old["metadata"]:
                new["metadata"][key] = old["metadata"][key]
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        new["metadata"]["resourceVersion"] = self._bump()
        self._record(res.qualified, ns, self.objects.get((res.qualified, ns, name)), new)
        self.objects[(res.qualified, ns, name)] = new
        return copy.deepcopy(new)

    def replace(self, res: Resource, ns: str, name: str, body: Obj) -> Obj:
        with self.lock:
            old = self.get(res, ns, name)
            md = body.get("metadata") or {}
            if md.get("name") not in (None, name):
                raise ApiError(400, "BadRequest", "the name of the object does not match the URL")
            rv = md.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(res, name)
            return self._write(res, ns, name, old, copy.deepcopy(body))

    def patch(self, res: Resource, ns: str, name: str, ctype: str, body: Any) -> Obj:
        with self.lock:
            old = self.get(res, ns, name)
            if ctype == MERGE:
                new = merge_patch(old, body)
            elif ctype == STRATEGIC:
                if not res.builtin:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media "
                        "types include: application/json-patch+json, "
                        "application/merge-patch+json, application/apply-patch+yaml",
                    )
                new = strategic_merge_patch(old, body)
            elif ctype == JSONPATCH:
                new = json_patch(old, body)
            else:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {JSONPATCH}, {MERGE}, {STRATEGIC}",
                )
            if not isinstance(new, dict):
                raise ApiError(422, "Invalid", "patch result is not an object")
            rv = (new.get("metadata") or {}).get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise self._conflict(res, name)
            uid = (new.get("metadata") or {}).get("uid")
            if uid and uid != old["metadata"].get("uid"):
                # The API server's UID precondition: the object was replaced.
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {old['metadata'].get('uid')}",
                    {"name": name, "group": res.group, "kind": res.plural},
                )
            return self._write(res, ns, name, old, new)

    def delete(self, res: Resource, ns: str, name: str, body: Obj | None = None) -> Obj:
        """DeleteOptions' ``preconditions`` (uid, resourceVersion) are honoured:
        409 Conflict when the object is another one than the caller meant."""
        with self.lock:
            obj = self.get(res, ns, name)
            pre = (body or {}).get("preconditions") or {}
            for key in ("uid", "resourceVersion"):
                if pre.get(key) and pre[key] != obj["metadata"].get(key):
                    raise ApiError(
                        409,
                        "Conflict",
                        f"Precondition failed: {key} in precondition: {pre[key]}, "
                        f"{key} in object meta: {obj['metadata'].get(key)}",
                        {"name": name, "group": res.group, "kind": res.plural},
                    )
            gone = self.objects.pop((res.qualified, ns, name))
            self._bump()
            self._record(res.qualified, ns, gone, None)
            return obj

    # -- eviction and disruption budgets --

    def _pdb_status(self, pdb: Obj) -> Obj:
        ns = pdb["metadata"]["namespace"]
        pods = [
            o
            for (q, ons, _), o in self.objects.items()
            if q == "pods"
            and ons == ns
            and selector_object_matches(
                pdb.get("spec", {}).get("selector"), o["metadata"].get("labels") or {}
            )
        ]
        selector = pdb.get("spec", {}).get("selector")
        expected = len(pods) + sum(
            1
            for ens, lab in self.evicted_owned
            if ens == ns and selector_object_matches(selector, lab)
        )
        healthy = sum(
            1
            for p in pods
            if (p.get("status") or {}).get("phase", "Running") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        )
        spec = pdb.get("spec") or {}
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = max(expected - _scaled(spec["maxUnavailable"], expected), 0)
        else:
            desired = expected
        return {
            "observedGeneration": pdb["metadata"].get("generation", 1),
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "disruptionsAllowed": max(healthy - desired, 0),
        }

    def evict(self, ns: str, name: str, body: Obj) -> Obj:
        pods = next(r for r in RESOURCES if r.plural == "pods")
        with self.lock:
            pod = self.get(pods, ns, name)
            if body.get("kind") != "Eviction" or body.get("apiVersion") not in (
                "policy/v1",
                "policy/v1beta1",
            ):
                raise ApiError(400, "BadRequest", "body must be a policy/v1 Eviction")
            if (body.get("metadata") or {}).get("name") not in (None, name):
                raise ApiError(400, "BadRequest", "name in URL does not match name in Eviction")
            labels = pod["metadata"].get("labels") or {}
            phase = (pod.get("status") or {}).get("phase", "Running")
            if phase == "Running":
                for (q, ons, pname), pdb in self.objects.items():
                    if q != "poddisruptionbudgets.policy" or ons != ns:
                        continue
                    if not selector_object_matches(pdb.get("spec", {}).get("selector"), labels):
                        continue
                    st = self._pdb_status(pdb)
                    if st["disruptionsAllowed"] < 1:
                        raise ApiError(
                            429,
                            "TooManyRequests",
                            "Cannot evict pod as it would violate the pod's disruption budget.",
                            {
                                "causes": [
                                    {
                                        "reason": "DisruptionBudget",
                                        "message": f"The disruption budget {pname} needs "
                                        f"{st['desiredHealthy']} healthy pods and has "
                                        f"{st['currentHealthy']} currently",
                                    }
                                ]
                            },
                        )
            gone = self.objects.pop(("pods", ns, name))
            if any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or []):
                self.evicted_owned.append((ns, labels))
            self._bump()
            self._record("pods", ns, gone, None)
            return status_object(201, "", "")


def _scaled(value: int | str, total: int) -> int:
    """IntOrString: an int, or a percentage of ``total`` rounded up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _route(path: str) -> tuple[Resource, str | None, str | None, str | None]:
    """-> (resource, namespace, name, subresource); ApiError 404 otherwise."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    for res in RESOURCES:
        if res.group == group and res.version == version and rest and res.plural == rest[0]:
            if ns is not None and not res.namespaced:
                break
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else None
            if len(rest) > 3:
                break
            return res, ns, name, sub
    raise ApiError(404, "NotFound", "the server could not find the requested resource")


@dataclass
class Fault:
    status: int
    remaining: int
    method: str | None
    path_prefix: str


class StandinServer:
    """The HTTP side.  Use as a context manager, or start()/stop()."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None):
        self.store = Store()
        self.token = token
        self.delay = 0.0
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []  # (method, path with query)
        self._lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"standin": self})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StandinServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="k8s-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> StandinServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- test and demo helpers --

    def fail_next(
        self, count: int = 1, status: int = 503, *, method: str | None = None, path_prefix: str = ""
    ) -> None:
        """The next ``count`` calls matching method and path prefix answer ``status``."""
        with self._lock:
            self.faults.append(Fault(status, count, method, path_prefix))

    def _take_fault(self, method: str, path: str) -> int | None:
        with self._lock:
            for f in self.faults:
                if (
                    f.remaining > 0
                    and f.method in (None, method)
                    and path.startswith(f.path_prefix)
                ):
                    f.remaining -= 1
                    return f.status
        return None

    def add(self, plural: str, obj: Obj, group: str | None = None) -> Obj:
        res = next(r for r in RESOURCES if r.plural == plural and group in (None, r.group))
        return self.store.put_object(res, obj)

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        res = next(r for r in RESOURCES if r.plural == plural)
        try:
            return self.store.get(res, namespace, name)
        except ApiError:
            return None

    def items(self, plural: str) -> list[Obj]:
        with self.store.lock:
            return [
                copy.deepcopy(o)
                for (q, _, _), o in self.store.objects.items()
                if q.split(".")[0] == plural
            ]

    def count(self, method: str | None = None, contains: str = "") -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if method in (None, m) and contains in p)

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()


class _Handler(BaseHTTPRequestHandler):
    standin: StandinServer
    protocol_version = "HTTP/1.1"
    #: headers and body go out in two writes: without this, Nagle plus delayed
    #: ACK add 40 ms to every keep-alive call
    disable_nagle_algorithm = True
    server_version = "slurm-hooks-k8s-standin/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("standin: " + format, *args)

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if code == 429:
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        sa = self.standin
        split = urlsplit(self.path)
        with sa._lock:
            sa.requests.append((self.command, self.path))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if sa.delay:
            time.sleep(sa.delay)
        try:
            if sa.token is not None and self.headers.get("Authorization") != f"Bearer {sa.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = sa._take_fault(self.command, split.path)
            if fault is not None:
                raise ApiError(
                    fault,
                    "InternalError" if fault >= 500 else "TooManyRequests",
                    f"injected fault {fault}",
                )
            if split.path in ("/healthz", "/readyz", "/livez"):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
                return
            body = json.loads(raw) if raw else None
            query = parse_qs(split.query)
            if self.command == "GET" and (query.get("watch") or [""])[0] in ("1", "true"):
                res, ns, name, sub = _route(split.path)
                if name is not None or sub is not None:
                    raise ApiError(405, "MethodNotAllowed", "watch a collection, not an object")
                try:
                    self._watch(res, ns, query)
                except ApiError as exc:
                    if exc.code != 410:
                        raise
                    # As the real server: 200, then an ERROR event with the Status.
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self._chunk(
                        {
                            "type": "ERROR",
                            "object": status_object(exc.code, exc.reason, exc.message),
                        }
                    )
                    self.wfile.write(b"0\r\n\r\n")
                return
            self._send(*self._dispatch(split.path, query, body))
        except ApiError as exc:
            self._send(exc.code, status_object(exc.code, exc.reason, exc.message, exc.details))
        except json.JSONDecodeError as exc:
            self._send(400, status_object(400, "BadRequest", f"invalid JSON: {exc}"))
        except (BrokenPipeError, ConnectionResetError):
            log.debug("standin: client went away")

    def _chunk(self, doc: Obj) -> None:
        data = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _watch(self, res: Resource, ns: str | None, query: dict[str, list[str]]) -> None:
        """A watch answer: 200, then one JSON line per event, chunked, until
        ``timeoutSeconds`` (default 60) have passed."""
        store = self.standin.store
        labels = (query.get("labelSelector") or [""])[0]
        fields = (query.get("fieldSelector") or [""])[0]
        bookmarks = (query.get("allowWatchBookmarks") or [""])[0] in ("1", "true")
        try:
            since = int((query.get("resourceVersion") or ["0"])[0] or 0)
            timeout = float((query.get("timeoutSeconds") or ["60"])[0])
        except ValueError as exc:
            raise ApiError(
                400, "BadRequest", "resourceVersion and timeoutSeconds: numbers"
            ) from exc
        with store.lock:  # a bad selector is still a plain 400 answer
            events, since = store.watch_since(res, ns, labels, fields, since)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        while True:
            for kind, obj in events:
                self._chunk({"type": kind, "object": obj})
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with store.lock:
                if store.rv == since:
                    store.changed.wait(left)
                try:
                    events, since = store.watch_since(res, ns, labels, fields, since)
                except ApiError as exc:  # fell out of the history while waiting
                    self._chunk(
                        {
                            "type": "ERROR",
                            "object": status_object(exc.code, exc.reason, exc.message),
                        }
                    )
                    break
        if bookmarks:
            mark = {"kind": res.kind, "apiVersion": res.api_version}
            self._chunk(
                {
                    "type": "BOOKMARK",
                    "object": {**mark, "metadata": {"resourceVersion": str(since)}},
                }
            )
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _dispatch(self, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Obj]:
        store = self.standin.store
        res, ns, name, sub = _route(path)
        ns_key = ns or ""
        method = self.command
        if sub is not None:
            if res.plural == "pods" and sub == "eviction" and method == "POST" and ns:
                return 201, store.evict(ns, name or "", body or {})
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if res.namespaced and name is not None and ns is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            if method == "GET":
                labels = (query.get("labelSelector") or [""])[0]
                fields = (query.get("fieldSelector") or [""])[0]
                try:
                    limit = max(0, int((query.get("limit") or ["0"])[0]))
                except ValueError as exc:
                    raise ApiError(400, "BadRequest", "limit must be an integer") from exc
                cont = (query.get("continue") or [""])[0]
                return 200, store.list(res, ns, labels, fields, limit=limit, cont=cont)
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError(400, "BadRequest", "body must be an object")
                if res.namespaced and ns is None:
                    raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
                return 201, store.create(res, ns_key, body)
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if method == "GET":
            return 200, store.get(res, ns_key, name)
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "body must be an object")
            return 200, store.replace(res, ns_key, name, body)
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            return 200, store.patch(res, ns_key, name, ctype, body)
        if method == "DELETE":
            obj = store.delete(res, ns_key, name, body if isinstance(body, dict) else None)
            return 200, obj
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@contextmanager
def running(token: str | None = None) -> Iterator[StandinServer]:
    """``with running() as api: KubeClient(api.url)...``"""
    server = StandinServer(token=token).start()
    try:
        yield server
    finally:
        server.stop()


def serve(host: str = "127.0.0.1", port: int = 8001, token: str | None = None) -> None:
    """Run in the foreground (``slurm-hooks lab k8s-standin``)."""
    server = StandinServer(host, port, token=token)
    log.info("kubernetes API stand-in listening on %s", server.url)
    try:
        server.httpd.serve_forever()
    finally:
        server.httpd.server_close()
