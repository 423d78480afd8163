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
"""

from __future__ import annotations

import logging
import signal as _signal
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import SlurmError, SlurmUnavailable
from slurm_hooks.core.model import JobInfo, NodeState
from slurm_hooks.slurm import parse
from slurm_hooks.slurm.base import SignalTarget
from slurm_hooks.slurm.cli_backend import (
    ACTIVE_JOB_STATES,
    check_job_id,
    check_reason,
    check_signal,
)

log = logging.getLogger(__name__)

DEFAULT_API = "v0.0.38"

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
        job_id=str(parse._int(obj.get("job_id"))),
        user=_str(obj.get("user_name")),
        state=parse.job_state_name(obj.get("job_state")),
        nodes=_str(obj.get("nodes")) or "",
        batch_host=_str(obj.get("batch_host")),
        requeue=bool(requeue) if requeue is not None else None,
        comment=_str(obj.get("comment")),
        admin_comment=_str(obj.get("admin_comment")),
        restart_count=parse._int(obj.get("restart_cnt")) or 0,
        name=_str(obj.get("name")),
        partition=_str(obj.get("partition")),
        num_nodes=parse._int(obj.get("node_count")),
    )


class RestClient:
    """SlurmClient over slurmrestd.

    ``socket`` (a unix socket path) or ``url`` (``http://host:6820``) plus
    ``user``/``token`` for JWT.  ``api`` is the OpenAPI plugin version the
    slurmrestd serves (``v0.0.38`` on 22.05).
    """

    def __init__(
        self,
        *,
        socket: str | None = None,
        url: str | None = None,
        user: str | None = None,
        token: str | None = None,
        api: str = DEFAULT_API,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        session: Any = None,
    ) -> None:
        import requests
        from urllib3.util.retry import Retry

        if bool(socket) == bool(url):
            raise SlurmError("rest backend: give exactly one of socket= or url=")
        self.api = api
        self.timeout = timeout
        retry = Retry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            backoff_factor=backoff,
            status_forcelist=(502, 503, 504),
            allowed_methods=frozenset({"GET", "POST", "DELETE"}),
            raise_on_status=False,
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
            adapter = requests.adapters.HTTPAdapter(max_retries=retry)
            self.session.mount("http://", adapter)
            self.session.mount("https://", adapter)
        if token:
            self.session.headers["X-SLURM-USER-TOKEN"] = token
            if user:
                self.session.headers["X-SLURM-USER-NAME"] = user
        self.session.headers["Accept"] = "application/json"
        self._requests = requests

    # -- plumbing -------------------------------------------------------------

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
            raise SlurmError(
                f"slurmrestd {method} {path}: HTTP {resp.status_code} {resp.reason}: {detail}"
            )
        return doc if isinstance(doc, dict) else {}

    def _unsupported(self, op: str) -> SlurmError:
        return SlurmError(
            f"rest backend: slurmrestd openapi/{self.api} has no {op} operation; "
            "use the cli backend (get_client('cli')) for it"
        )

    def _node_updates(self) -> bool:
        return _api_tuple(self.api) >= (0, 0, 39)

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
        raise SlurmError(f"node {name!r} not found")

    def _update_node(self, name: str, body: Mapping[str, Any], op: str) -> None:
        if not self._node_updates():
            raise self._unsupported(op)
        self._request("POST", f"node/{urllib.parse.quote(name)}", body=dict(body))

    def drain(self, name: str, reason: str) -> None:
        self._update_node(name, {"state": ["DRAIN"], "reason": check_reason(reason)}, "node drain")

    def resume(self, name: str) -> None:
        self._update_node(name, {"state": ["RESUME"]}, "node resume")

    def down(self, name: str, reason: str) -> None:
        self._update_node(name, {"state": ["DOWN"], "reason": check_reason(reason)}, "node down")

    def update_reason(self, name: str, reason: str) -> None:
        self._update_node(name, {"reason": check_reason(reason)}, "node reason update")

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
        return [
            j
            for j in self.list_jobs(ACTIVE_JOB_STATES)
            if j.nodes and hostlist.contains(j.nodes, name)
        ]

    def get_job(self, job_id: str) -> JobInfo:
        jid = check_job_id(job_id)
        doc = self._request("GET", f"job/{jid}")
        jobs = [job_from_json(j) for j in doc.get("jobs") or [] if isinstance(j, Mapping)]
        for job in jobs:
            if job.job_id == jid:
                return job
        raise SlurmError(f"job {jid} not found")

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
        if admin and _api_tuple(self.api) < (0, 0, 39):
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
