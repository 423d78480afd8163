"""Slurm through slurmrestd, with requests.

Two transports: a unix socket (``rest_auth/local``: slurmrestd trusts the
peer's uid, no token) through requests-unixsocket, or HTTP(S) with a JWT in
the ``X-SLURM-USER-NAME``/``X-SLURM-USER-TOKEN`` headers.  Backoff on
connection errors and 502/503/504 is urllib3's Retry, mounted on the
session; every request has a timeout.

What OpenAPI v0.0.38 (Slurm 22.05) offers, checked against its /openapi/v3:
GET nodes and node/{name}; GET jobs and job/{id}; POST job/{id} (update,
``comment`` but no ``admin_comment``); DELETE job/{id}?signal= (signal or
cancel the whole job).  It has no node update, no requeue and no config
endpoint: those raise SlurmError naming the cli backend.  From v0.0.39
(23.02) ``POST node/{name}`` exists and is used.

Which version to speak is asked of the server, once per client: the paths
its ``/openapi/v3`` lists (pings newest-first where that document is not
served), the newest of :data:`KNOWN_APIS` it offers.  slurmrestd serves
only its release's three newest plugins (24.11: v0.0.40-v0.0.42, no
v0.0.38), so a fixed default meant HTTP 404 on every call after an upgrade.
:data:`LACKS` says which versions have no node update or requeue.
"""

from __future__ import annotations

import logging
import re
import signal as _signal
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import JobGone, NodeNotFound, SlurmError, SlurmUnavailable
from slurm_hooks.core.http_retry import mount_retry, retry_policy
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.core.slurm_model import ACTIVE_JOB_STATES
from slurm_hooks.slurm import job_gpus, parse, parse_config, parse_values
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.cli_backend import (
    check_comment,
    check_job_id,
    check_reason,
    check_signal,
)
from slurm_hooks.slurm.refusals import Op, typed

log = logging.getLogger(__name__)

DEFAULT_API = "v0.0.38"
#: ``api=`` (and ``[general] slurm_rest_api``) value: ask the server.
AUTO_API = "auto"
#: The OpenAPI versions this client speaks, newest first.
KNOWN_APIS: Sequence[str] = (
    "v0.0.44",
    "v0.0.43",
    "v0.0.42",
    "v0.0.41",
    "v0.0.40",
    "v0.0.39",
    "v0.0.38",
)
_PATH_API_RE = re.compile(r"^/slurm/(v0\.0\.\d+)/")

#: Operation -> the OpenAPI versions without it (checked in the /openapi/v3
#: of slurmrestd 22.05.8 for v0.0.38 and 24.11.5 for v0.0.40-v0.0.42:
#: ``job/{job_id}`` is get/post/delete, no requeue anywhere).  Those calls
#: raise SlurmError naming the cli backend.
LACKS: Mapping[str, frozenset[str]] = {
    "node update": frozenset({"v0.0.38"}),
    "admin comment update": frozenset({"v0.0.38"}),
    "job requeue": frozenset(KNOWN_APIS),
    "show config": frozenset(KNOWN_APIS),
}

#: The newest OpenAPI plugin each Slurm release serves (slurmrestd also keeps
#: the two before it; 24.11 serves v0.0.40, v0.0.41 and v0.0.42).  The
#: 23.11 and 24.11 values are what slurmrestd reported in its ``meta`` in the
#: recorded answers under tests/data/slurm/.
NEWEST_API: Sequence[tuple[tuple[int, int], str]] = (
    ((24, 11), "v0.0.42"),
    ((24, 5), "v0.0.41"),
    ((23, 11), "v0.0.40"),
    ((23, 2), "v0.0.39"),
)


def api_for_version(version: Sequence[int]) -> str:
    """The OpenAPI version to ask a slurmrestd of this Slurm ``version`` for:
    the newest it serves (v0.0.38 before 23.02).  Releases after 24.11 get
    v0.0.42 too, which they still serve."""
    major_minor = (int(version[0]), int(version[1]))
    for since, api in NEWEST_API:
        if major_minor >= since:
            return api
    return DEFAULT_API


def _api_tuple(api: str) -> tuple[int, ...]:
    return tuple(int(p) for p in api.lstrip("v").split("."))


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _str(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def job_from_json(obj: Mapping[str, Any]) -> JobInfo:
    """One job object: v0.0.38 (``job_state: 'RUNNING'``, plain ints) or
    newer (``job_state: ['RUNNING']`` or ``['COMPLETED', 'COMPLETING']``,
    ``{"set":..,"number":..}`` numbers; ``batch_host: ""`` while pending)."""
    requeue = obj.get("requeue")
    return JobInfo(
        job_id=str(parse_values.json_int(obj.get("job_id"))),
        user=_str(obj.get("user_name")),
        state=parse.job_state_name(obj.get("job_state")),
        nodes=_str(obj.get("nodes")) or "",
        batch_host=_str(obj.get("batch_host")),
        requeue=bool(requeue) if requeue is not None else None,
        comment=_str(obj.get("comment")),
        admin_comment=_str(obj.get("admin_comment")),
        restart_count=parse_values.json_int(obj.get("restart_cnt")) or 0,
        name=_str(obj.get("name")),
        partition=_str(obj.get("partition")),
        num_nodes=parse_values.json_int(obj.get("node_count")),
        tres_per=",".join(
            v
            for k in ("tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket")
            if (v := _str(obj.get(k)))
        )
        or None,
    )


#: slurmrestd 24.11 (v0.0.42) answers ``GET node/{name}`` for an unknown
#: node with HTTP 200 and this description, error_number 0
#: (tests/data/slurm/24.11-rest-v0.0.42-node-unfound.json).
_NODE_UNFOUND = "Failure to query node"


def _rest_op(method: str, path: str, params: Mapping[str, str] | None) -> tuple[Op, str]:
    kind, _, subject = path.strip("/").partition("/")
    subject = urllib.parse.unquote(subject)
    if kind == "job" and subject:
        if method == "GET":
            return Op.JOB_READ, subject
        if method == "DELETE":
            return (Op.JOB_SIGNAL if params and "signal" in params else Op.JOB_CANCEL), subject
        return Op.JOB_UPDATE, subject
    if kind == "node" and subject:
        return (Op.NODE_READ if method == "GET" else Op.NODE_UPDATE), subject
    return Op.OTHER, ""


def classify_errors(
    method: str,
    path: str,
    params: Mapping[str, str] | None,
    errors: Sequence[Any],
    message: str,
) -> SlurmError:
    """The one place this backend reads Slurm's refusals: slurmrestd's
    ``errors[]`` (``error_number`` is Slurm's errno, see slurm/refusals.py;
    recorded answers in tests/data/slurm/*-rest-*-unfound.json) as a typed
    error, else a SlurmError(message)."""
    op, subject = _rest_op(method, path, params)
    for e in errors:
        if not isinstance(e, Mapping):
            continue
        number = parse_values.json_int(e.get("error_number"))
        text = f"{e.get('error') or ''} {e.get('description') or ''}"
        if op is Op.NODE_READ and str(e.get("description") or "").startswith(_NODE_UNFOUND):
            return NodeNotFound(subject, message)
        err = typed(op, subject, message, errno=number or None, text=text)
        if type(err) is not SlurmError:
            return err
    return SlurmError(message)


class RestClient:
    """SlurmClient over slurmrestd.

    ``socket`` (a unix socket path) or ``url`` (``http://host:6820``) plus
    ``user``/``token`` for JWT.  ``api``: the OpenAPI version to speak
    (``v0.0.42``), or ``auto``/None (the default) to take the newest of
    :data:`KNOWN_APIS` the server offers, asked on first use and kept.
    """

    def __init__(
        self,
        *,
        socket: str | None = None,
        url: str | None = None,
        user: str | None = None,
        token: str | None = None,
        api: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        session: Any = None,
    ) -> None:
        import requests

        if bool(socket) == bool(url):
            raise SlurmError("rest backend: give exactly one of socket= or url=")
        self._api = None if api in (None, "", AUTO_API) else str(api)
        self.timeout = timeout
        retry = retry_policy(
            retries, backoff=backoff, methods=("GET", "POST", "DELETE"), statuses=(502, 503, 504)
        )
        if socket:
            try:
                import requests_unixsocket
            except ImportError as exc:
                raise SlurmError(
                    "rest backend over a unix socket needs requests-unixsocket "
                    "(pip install 'slurm-hooks[rest]')"
                ) from exc
            self.base = "http+unix://" + urllib.parse.quote(str(socket), safe="")
            self.session = session or requests_unixsocket.Session()
            self.session.mount("http+unix://", requests_unixsocket.UnixAdapter(max_retries=retry))
        else:
            self.base = str(url).rstrip("/")
            self.session = session or requests.Session()
            mount_retry(self.session, retry)
        if token:
            self.session.headers["X-SLURM-USER-TOKEN"] = token
            if user:
                self.session.headers["X-SLURM-USER-NAME"] = user
        self.session.headers["Accept"] = "application/json"
        self._requests = requests

    # -- plumbing -------------------------------------------------------------

    @property
    def api(self) -> str:
        """The OpenAPI version spoken; the first use asks the server
        (:meth:`negotiate`)."""
        if self._api is None:
            self._api = self.negotiate()
        return self._api

    def _get_raw(self, path: str) -> Any:
        try:
            return self.session.request(
                "GET", f"{self.base}/{path.lstrip('/')}", params=None, json=None,
                timeout=self.timeout,
            )  # fmt: skip
        except self._requests.RequestException as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable (GET {path}): {exc}") from exc

    def offered_apis(self) -> list[str]:
        """The ``/slurm/v0.0.NN/`` versions in the server's ``/openapi/v3``
        (newest first; empty when it serves no such document)."""
        resp = self._get_raw("openapi/v3")
        if resp.status_code != 200:
            return []
        try:
            doc = resp.json()
        except ValueError:
            return []
        paths = doc.get("paths") if isinstance(doc, dict) else None
        found = {m.group(1) for p in paths or () if (m := _PATH_API_RE.match(str(p)))}
        return sorted(found, key=_api_tuple, reverse=True)

    def negotiate(self) -> str:
        """The newest of :data:`KNOWN_APIS` the server offers: from its
        ``/openapi/v3``, else the first ``ping`` that answers 200 (newest
        first).  SlurmUnavailable when it cannot be reached (nothing is kept,
        the next call asks again); SlurmError when it offers none we speak."""
        offered = self.offered_apis()
        for api in KNOWN_APIS:
            if api in offered:
                log.debug("slurmrestd at %s offers %s: speaking %s", self.base, offered, api)
                return api
        for api in KNOWN_APIS:
            if self._get_raw(f"slurm/{api}/ping").status_code == 200:
                return api
        raise SlurmError(
            f"slurmrestd at {self.base} offers none of the OpenAPI versions "
            f"{KNOWN_APIS[-1]}..{KNOWN_APIS[0]} (it lists: {', '.join(offered) or 'none'}); "
            "set [general] slurm_rest_api or use the cli backend"
        )

    def _url(self, path: str) -> str:
        return f"{self.base}/slurm/{self.api}/{path.lstrip('/')}"

    def _request(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: Any = None
    ) -> dict[str, Any]:
        url = self._url(path)
        try:
            resp = self.session.request(method, url, params=params, json=body, timeout=self.timeout)
        except self._requests.RequestException as exc:
            raise SlurmUnavailable(f"slurmrestd unreachable ({method} {path}): {exc}") from exc
        try:
            doc = resp.json() if resp.content else {}
        except ValueError:
            doc = {}
        errors = doc.get("errors") if isinstance(doc, dict) else None
        if resp.status_code >= 400 or errors:
            detail = (
                "; ".join(
                    str(e.get("description") or e.get("error") or e)
                    for e in errors or []
                    if isinstance(e, Mapping)
                )
                or resp.text[:300]
            )
            if resp.status_code in (502, 503, 504):
                raise SlurmUnavailable(f"slurmrestd {method} {path}: HTTP {resp.status_code}")
            raise classify_errors(
                method, path, params, errors if isinstance(errors, list) else [],
                f"slurmrestd {method} {path}: HTTP {resp.status_code} {resp.reason}: {detail}",
            )  # fmt: skip
        return doc if isinstance(doc, dict) else {}

    def _unsupported(self, op: str, kind: str | None = None) -> SlurmError:
        """``op`` (``node drain``) is not served; ``kind`` is its entry in
        :data:`LACKS` (``node update``; default: ``op``)."""
        lacking = LACKS.get(kind or op, frozenset(KNOWN_APIS))
        having = [a for a in KNOWN_APIS if a not in lacking]
        if having:
            where, api = f"OpenAPI {', '.join(reversed(having))} only", self.api
        else:  # no version has it: no need to ask the server which it speaks
            where = f"none of OpenAPI {KNOWN_APIS[-1]}..{KNOWN_APIS[0]}"
            api = self._api or "(any)"
        return SlurmError(
            f"rest backend: slurmrestd openapi/{api} has no {op} operation "
            f"({where}); use the cli backend (get_client('cli')) for it"
        )

    def _has(self, op: str) -> bool:
        return self.api not in LACKS.get(op, frozenset())

    def _node_updates(self) -> bool:
        return self._has("node update")

    # -- nodes ------------------------------------------------------------------

    def list_nodes(self, names: Sequence[str] | str | None = None) -> list[NodeState]:
        nodes = parse.nodes_from_doc(self._request("GET", "nodes"))
        if names is None:
            return nodes
        wanted = hostlist.expand(names) if isinstance(names, str) else list(names)
        index = {n.name: n for n in nodes}
        missing = [w for w in wanted if w not in index]
        if missing:
            raise SlurmError(f"unknown node(s): {hostlist.fold(missing)}")
        return [index[w] for w in wanted]

    def get_node(self, name: str) -> NodeState:
        nodes = parse.nodes_from_doc(self._request("GET", f"node/{urllib.parse.quote(name)}"))
        for node in nodes:
            if node.name == name:
                return node
        raise NodeNotFound(name)

    def _update_node(self, name: str, body: Mapping[str, Any], op: str) -> None:
        if not self._node_updates():
            raise self._unsupported(op, "node update")
        self._request("POST", f"node/{urllib.parse.quote(name)}", body=dict(body))

    def drain(self, name: str, reason: str) -> None:
        self._update_node(name, {"state": ["DRAIN"], "reason": check_reason(reason)}, "node drain")

    def resume(self, name: str) -> None:
        self._update_node(name, {"state": ["RESUME"]}, "node resume")

    def down(self, name: str, reason: str) -> None:
        self._update_node(name, {"state": ["DOWN"], "reason": check_reason(reason)}, "node down")

    def update_reason(self, name: str, reason: str) -> None:
        self._update_node(name, {"reason": check_reason(reason)}, "node reason update")

    def set_node_comment(self, name: str, comment: str) -> None:
        self._update_node(name, {"comment": check_comment(comment)}, "node comment update")

    def server_time(self) -> datetime:
        """slurmctld's clock: ``/diag``'s ``statistics.req_time``."""
        return parse_config.server_time_from_diag(self._request("GET", "diag"))

    # -- jobs ---------------------------------------------------------------------

    def list_jobs(self, states: Sequence[str] | None = None) -> list[JobInfo]:
        doc = self._request("GET", "jobs")
        jobs = [job_from_json(j) for j in doc.get("jobs") or [] if isinstance(j, Mapping)]
        if states:
            wanted = {s.upper() for s in states}
            jobs = [j for j in jobs if j.state in wanted]
        else:  # like squeue: finished jobs are not listed
            jobs = [j for j in jobs if j.state in ("PENDING", *ACTIVE_JOB_STATES, "REQUEUED")]
        return jobs

    def jobs_on_node(self, name: str) -> list[JobInfo]:
        return [j for j in self.list_jobs(ACTIVE_JOB_STATES) if j.runs_on(name)]

    def get_job(self, job_id: str) -> JobInfo:
        jid = check_job_id(job_id)
        doc = self._request("GET", f"job/{jid}")
        jobs = [job_from_json(j) for j in doc.get("jobs") or [] if isinstance(j, Mapping)]
        for job in jobs:
            if job.job_id == jid:
                return job
        raise JobGone(jid)

    def job_gpu_detail(self, job_id: str) -> list[tuple[str, str]]:
        """The job's ``gres_detail`` (JobGpus; slurm/job_gpus.py)."""
        jid = check_job_id(job_id)
        doc = self._request("GET", f"job/{jid}")
        for obj in doc.get("jobs") or []:
            if isinstance(obj, Mapping) and str(parse_values.json_int(obj.get("job_id"))) == jid:
                return job_gpus.detail_from_json(obj)
        raise JobGone(jid)

    def signal_job(self, job_id: str, signal: str, target: SignalTarget) -> None:
        # v0.0.38 signals the whole job (batch shell and steps), like scancel --full.
        if target != SignalTarget.FULL:
            raise self._unsupported(f"signal to {target.value} only")
        sig = check_signal(signal)
        if sig.isdigit():  # the v0.0.38 schema takes names only: HUP, USR1, ...
            sig = _signal.Signals(int(sig)).name
        sig = sig.removeprefix("SIG")
        self._request("DELETE", f"job/{check_job_id(job_id)}", params={"signal": sig})

    def requeue(self, job_id: str) -> None:
        raise self._unsupported("job requeue")

    def cancel(self, job_id: str) -> None:
        self._request("DELETE", f"job/{check_job_id(job_id)}")

    def set_job_comment(self, job_id: str, comment: str, *, admin: bool = False) -> None:
        if admin and not self._has("admin comment update"):
            raise self._unsupported("admin comment update")
        key = "admin_comment" if admin else "comment"
        self._request("POST", f"job/{check_job_id(job_id)}", body={key: comment})

    def show_config(self) -> dict[str, str]:
        raise self._unsupported("show config")

    def ping(self) -> bool:
        try:
            doc = self._request("GET", "ping")
        except SlurmError:
            return False
        # v0.0.38 says "ping": "UP"; v0.0.40+ (23.11, 24.11) "pinged": "UP".
        pings = [p for p in doc.get("pings") or [] if isinstance(p, dict)]
        return any(str(_first(p.get("pinged", p.get("ping")))).upper() == "UP" for p in pings)

    def __repr__(self) -> str:
        return f"RestClient(base={self.base!r}, api={self.api!r})"
