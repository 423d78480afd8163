"""A small Kubernetes API client: the verbs the bridge needs, nothing more.

Why not the official ``kubernetes`` package: it is large, slow to import and
generated; we make a handful of calls.  What we keep from it: the same
authentication sources (in-cluster service account, kubeconfig), TLS
verification always on, and errors that carry the API's Status (code, reason,
message).

Retries: urllib3's Retry (applied by ``k8s/transport.py``; by requests for
watches and a caller's own session).  Connection failures are retried
for every verb (the request never reached the server); 5xx and 429 answers
only for GET/PUT/DELETE, which are idempotent.  PATCH and POST answers are
never retried here: a 429 from the Eviction API means "a disruption budget
says no, come back later", which is the caller's decision.

Decoding: msgspec, not the standard json module.  At 50,000 Nodes a LIST is
about 35 MB of JSON per pass; msgspec decodes it about twice as fast, and
with an ``ItemView`` (a TypedDict of the fields a caller reads) it skips the
other fields while parsing instead of building and dropping them: a 500-node
page costs under 1 ms instead of ~4 ms (bench/bench_bridge.py).  The views,
decoders and error mapping live in ``k8s/answers.py``, the API paths in
``k8s/paths.py`` (importable from here too).

Watches: ``watch()`` streams the changes after a resourceVersion as the API
server sends them (one JSON object per line) and ends when the server closes
the answer after ``timeoutSeconds``; an ERROR event (410 Expired: the version
is older than the server's history) is raised as KubernetesError, and the
caller lists again (``WatchedList`` in ``k8s/cache.py``).
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec
import requests
import urllib3
from requests.utils import DEFAULT_CA_BUNDLE_PATH, select_proxy

from slurm_hooks.core.errors import ConfigError, KubernetesError
from slurm_hooks.core.http_retry import mount_retry, retry_policy
from slurm_hooks.k8s.answers import (  # noqa: F401 (re-exported: importable from here too)
    ItemView,
    Obj,
    apply_view,
    as_requests_error,
    decode_any,
    event_decoder,
    item_decoder,
    page_decoder,
    status_error,
)
from slurm_hooks.k8s.paths import (  # noqa: F401 (re-exported: importable from here too)
    REPLACEMENT_GROUP,
    REPLACEMENT_PLURAL,
    REPLACEMENT_VERSION,
    eviction_path,
    lease_path,
    machine_path,
    nodes_path,
    pdb_path,
    pods_path,
    replacement_path,
)
from slurm_hooks.k8s.transport import Answer, Transport

log = logging.getLogger(__name__)

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = {"merge": MERGE_PATCH, "strategic": STRATEGIC_PATCH, "json": JSON_PATCH}

#: How often a service-account token file is read again (bound tokens rotate).
TOKEN_REREAD_S = 60.0
CallHook = Callable[[str, str, int, float], None]


#: An answer read in full (the transport's; requests' answers are copied in).
_Answer = Answer


class KubeClient:
    """Talks to one API server.  ``calls`` counts requests by verb, for the
    metrics and the benchmark."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        on_call: CallHook | None = None,
        session: requests.Session | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.calls: Counter[str] = Counter()
        self.on_call = on_call
        self._token = token
        self._token_file = token_file
        self._token_read_at = 0.0
        self._lock = threading.Lock()
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self.session = session or requests.Session()
        # TLS verification is always on: the system store, or the cluster's CA.
        self.session.verify = ca_file if ca_file else True
        if client_cert:
            self.session.cert = client_cert
        retry = retry_policy(
            retries,
            backoff=backoff,
            backoff_max=10.0,
            methods=("GET", "HEAD", "PUT", "DELETE", "OPTIONS"),
        )
        self._retry = retry
        #: ``http.client`` kept alive, for every call but watches (built on
        #: first use from the session's TLS settings, ``k8s/transport.py``):
        #: requests' per-call preparation and then urllib3's were most of a
        #: small call's CPU, and an incident pass at 50,000 nodes makes ~1,600.
        #: None: a caller's own session, or a proxy: requests does it all.
        self._transport: Transport | None = None
        self._fast = session is None
        mount_retry(self.session, retry, pool_maxsize=8)
        if self.session.trust_env:
            # Every call goes to one server: resolve the environment's proxy
            # and CA-bundle settings for it once, not on every request
            # (requests re-reads them per call, ~0.4 ms each: a third of a
            # small call's CPU, and 100 LIST pages make a pass).
            env = self.session.merge_environment_settings(
                self.server, {}, None, self.session.verify, None
            )
            self.session.proxies.update(env.get("proxies") or {})
            self.session.verify = env.get("verify", self.session.verify)
            self.session.trust_env = False

    # -- construction -------------------------------------------------------

    @classmethod
    def in_cluster(cls, root: str = SA_DIR, **kw: Any) -> KubeClient:
        """The pod's service account: token and CA from ``root``, server from
        KUBERNETES_SERVICE_HOST/PORT."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token_file = Path(root, "token")
        if not host or not token_file.exists():
            raise ConfigError("not running in a cluster (no KUBERNETES_SERVICE_HOST or token)")
        if ":" in host:
            host = f"[{host}]"
        ca = Path(root, "ca.crt")
        return cls(
            f"https://{host}:{port}",
            token_file=str(token_file),
            ca_file=str(ca) if ca.exists() else None,
            **kw,
        )

    @classmethod
    def from_kubeconfig(cls, path: str, context: str | None = None, **kw: Any) -> KubeClient:
        """A kubeconfig's current (or named) context.  Supports server,
        certificate-authority(-data), token, tokenFile and client
        certificate/key (files or -data).  exec plugins and disabled TLS
        verification are refused."""
        import yaml  # lazily: only the bridge reading a kubeconfig needs it

        try:
            text = Path(path).read_text(encoding="utf-8")
            doc = yaml.safe_load(text) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read kubeconfig: {exc}", path=path) from exc
        base = Path(path).resolve().parent

        def named(kind: str, name: str | None) -> Mapping[str, Any]:
            for item in doc.get(kind) or []:
                if item.get("name") == name:
                    return item.get(kind[:-1]) or {}
            raise ConfigError(f"no {kind[:-1]} named {name!r}", path=path, key=kind)

        ctx_name = context or doc.get("current-context")
        if not ctx_name:
            raise ConfigError("no current-context", path=path, key="current-context")
        ctx = named("contexts", ctx_name)
        cluster = named("clusters", ctx.get("cluster"))
        user = named("users", ctx.get("user")) if ctx.get("user") else {}
        server = cluster.get("server")
        if not server:
            raise ConfigError("cluster has no server", path=path, key="clusters.server")
        if cluster.get("insecure-skip-tls-verify"):
            raise ConfigError(
                "insecure-skip-tls-verify is not supported: give the cluster's CA",
                path=path,
                key="clusters.insecure-skip-tls-verify",
            )
        if user.get("exec") or user.get("auth-provider"):
            raise ConfigError(
                "exec and auth-provider credentials are not supported: use a token or a client certificate",
                path=path,
                key="users.user",
            )
        tmp: tempfile.TemporaryDirectory[str] | None = None

        def material(key: str) -> str | None:
            nonlocal tmp
            src = cluster if key.startswith("certificate-authority") else user
            if src.get(f"{key}-data"):
                if tmp is None:
                    tmp = tempfile.TemporaryDirectory(prefix="slurm-hooks-kube-")
                out = Path(tmp.name, key)
                fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(base64.b64decode(src[f"{key}-data"]))
                return str(out)
            if src.get(key):
                return str(base / src[key])
            return None

        ca = material("certificate-authority")
        cert = material("client-certificate")
        key = material("client-key")
        token_file = user.get("tokenFile")
        client = cls(
            server,
            token=user.get("token"),
            token_file=str(base / token_file) if token_file else None,
            ca_file=ca,
            client_cert=(cert, key) if cert and key else None,
            **kw,
        )
        client._tmpdir = tmp
        return client

    # -- transport ----------------------------------------------------------

    def _bearer(self) -> str | None:
        if self._token_file:
            now = time.monotonic()
            with self._lock:
                if self._token is None or now - self._token_read_at > TOKEN_REREAD_S:
                    try:
                        self._token = Path(self._token_file).read_text().strip()
                    except OSError as exc:
                        raise KubernetesError(f"cannot read token: {exc}") from exc
                    self._token_read_at = now
        return self._token

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        url: str | None = None,
        view: ItemView | None = None,
        answer_view: ItemView | None = None,
    ) -> Obj:
        """One call; the decoded JSON answer, or KubernetesError/ConflictError.
        With ``view``, the answer is a LIST page whose items are decoded
        into the view (``ItemView``); with ``answer_view``, the answer is
        one object, decoded into that view."""
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = msgspec.json.encode(body)
        started = time.monotonic()
        try:
            resp = self._send(method, url or self.server + path, params, data, headers)
        except requests.RequestException as exc:
            self._count(method, path, 0, started)
            raise KubernetesError(f"{method} {path}: {exc}") from exc
        except urllib3.exceptions.HTTPError as exc:
            self._count(method, path, 0, started)
            cause = as_requests_error(exc)
            raise KubernetesError(f"{method} {path}: {cause}") from cause
        self._count(method, path, resp.status, started)
        if resp.status >= 400:
            raise status_error(resp, method, path)
        content = resp.content
        if not content:
            return {}
        if answer_view is not None:
            return self._decode_object(content, answer_view, method, path, resp.status)
        if view is not None:
            try:
                page: Obj = page_decoder(view).decode(content)
            except msgspec.ValidationError:
                log.debug("%s %s: an item does not fit the view, decoding in full", method, path)
            except msgspec.DecodeError as exc:
                raise KubernetesError(
                    f"{method} {path}: answer is not JSON", status=resp.status
                ) from exc
            else:
                if view.finish is not None and page.get("items"):
                    page["items"] = list(map(view.finish, page["items"]))
                return page
        try:
            out = decode_any(content)
        except msgspec.DecodeError as exc:
            raise KubernetesError(
                f"{method} {path}: answer is not JSON", status=resp.status
            ) from exc
        if view is not None and isinstance(out, dict) and out.get("items"):
            out["items"] = apply_view(out["items"], view)
        return out if isinstance(out, dict) else {"items": out}

    @staticmethod
    def _decode_object(content: bytes, view: ItemView, method: str, path: str, status: int) -> Obj:
        """One object decoded straight into ``view`` (its other fields are
        skipped by the parser); in full and cut by ``view.fallback`` when
        it does not fit the view's types."""
        try:
            obj: Obj = item_decoder(view).decode(content)
        except msgspec.ValidationError:
            log.debug("%s %s: the answer does not fit the view, decoding in full", method, path)
        except msgspec.DecodeError as exc:
            raise KubernetesError(f"{method} {path}: answer is not JSON", status=status) from exc
        else:
            return view.finish(obj) if view.finish is not None else obj
        try:
            full = decode_any(content)
        except msgspec.DecodeError as exc:
            raise KubernetesError(f"{method} {path}: answer is not JSON", status=status) from exc
        if not isinstance(full, dict):
            raise KubernetesError(f"{method} {path}: answer is not an object", status=status)
        return view.fallback(full)

    def _send(
        self,
        method: str,
        url: str,
        params: Mapping[str, str] | None,
        data: bytes | None,
        headers: dict[str, str],
    ) -> _Answer:
        transport = self._transport if self._transport is not None else self._make_transport()
        target = url[len(self.server) :]
        if transport is None or not url.startswith(self.server) or target[:1] not in ("", "/"):
            # requests does it all (and a caller's ``url`` elsewhere goes there)
            resp = self.session.request(
                method, url, params=params, data=data, headers=headers, timeout=self.timeout
            )
            return _Answer(resp.status_code, resp.reason or "", resp.content)
        if params:
            target = f"{target}?{urlencode(params)}"
        return transport.send(method, target, data, headers)

    def _make_transport(self) -> Transport | None:
        """The transport for ``_send``, with the session's CA and client
        certificate (verification stays on); None where requests must do
        the call (a caller's session, or a proxy for the server)."""
        if not self._fast or select_proxy(self.server, self.session.proxies or {}):
            self._fast = False
            return None
        verify = self.session.verify
        ca = verify if isinstance(verify, str) else DEFAULT_CA_BUNDLE_PATH
        cert = self.session.cert
        client_cert: tuple[str, str | None] | None = None
        if isinstance(cert, tuple):
            client_cert = (cert[0], cert[1])
        elif isinstance(cert, str):
            client_cert = (cert, None)
        self._transport = Transport(
            self.server,
            timeout=self.timeout,
            retry=self._retry,
            ca_file=None if os.path.isdir(ca) else ca,
            ca_dir=ca if os.path.isdir(ca) else None,
            client_cert=client_cert,
        )
        return self._transport

    def _count(self, method: str, path: str, status: int, started: float) -> None:
        verb = method
        if method == "GET" and not _is_object_path(path):
            verb = "LIST"
        elif method == "WATCH":
            verb = "WATCH"
        self.calls[verb] += 1
        if self.on_call:
            self.on_call(verb, path, status, time.monotonic() - started)

    # -- verbs --------------------------------------------------------------

    def get(self, path: str) -> Obj:
        return self.request("GET", path)

    def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        item_view: Callable[[Obj], Obj] | ItemView | None = None,
    ) -> Obj:
        """A LIST; with ``limit``, fetched in pages of that many items
        (``limit``/``continue``) and returned as one list: no single answer
        holds the whole collection, so neither side buffers it at once.  An
        expired continue token (410) restarts the list once from the top;
        the result carries the last page's resourceVersion.  ``item_view``
        maps each item as its page is decoded (a caller keeps only the
        fields it reads: the whole list is never held at full size); an
        ``ItemView`` does it while parsing."""
        params = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        typed = item_view if isinstance(item_view, ItemView) else None
        plain = None if isinstance(item_view, ItemView) else item_view
        if not limit:
            out = self.request("GET", path, params=params or None, view=typed)
            if plain is not None and out.get("items"):
                out = {**out, "items": apply_view(out["items"], plain)}
            return out
        params["limit"] = str(int(limit))
        for attempt in (1, 2):
            items: list[Any] = []
            page: Obj = {}
            token = ""
            try:
                while True:
                    query = dict(params, **({"continue": token} if token else {}))
                    page = self.request("GET", path, params=query, view=typed)
                    got = page.get("items") or []
                    items.extend(map(plain, got) if plain is not None else got)
                    page = {k: v for k, v in page.items() if k != "items"}
                    token = str((page.get("metadata") or {}).get("continue") or "")
                    if not token:
                        break
            except KubernetesError as exc:
                if exc.status == 410 and token and attempt == 1:
                    log.info("LIST %s: continue token expired, listing again", path)
                    continue
                raise
            meta = dict(page.get("metadata") or {})
            meta.pop("continue", None)
            meta.pop("remainingItemCount", None)
            return {**page, "metadata": meta, "items": items}
        raise KubernetesError(f"LIST {path}: continue token expired twice", status=410)

    def watch(
        self,
        path: str,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 1,
        item_view: Callable[[Obj], Obj] | ItemView | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """The changes to a collection after ``resource_version``, as
        (type, object) pairs: ADDED, MODIFIED, DELETED and BOOKMARK (an
        object with only ``metadata.resourceVersion``: how far the stream
        got).  The server ends the answer after ``timeout_seconds``; so does
        this iterator.  An ERROR event raises KubernetesError with its
        status (410: the version is too old, list again).  ``item_view``
        cuts each object as for ``list``.  Counted as verb WATCH."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(timeout_seconds)),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        headers = {"Accept": "application/json"}
        token = self._bearer()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        typed = item_view if isinstance(item_view, ItemView) else None
        plain = None if isinstance(item_view, ItemView) else item_view
        decode = event_decoder(typed).decode if typed is not None else decode_any
        started = time.monotonic()
        try:
            resp = self.session.get(
                self.server + path,
                params=params,
                headers=headers,
                stream=True,
                # the read timeout covers the server's own end of the stream
                timeout=(self.timeout, self.timeout + timeout_seconds),
            )
        except requests.RequestException as exc:
            self._count("WATCH", path, 0, started)
            raise KubernetesError(f"WATCH {path}: {exc}") from exc
        self._count("WATCH", path, resp.status_code, started)
        with resp:
            if resp.status_code >= 400:
                answer = _Answer(resp.status_code, resp.reason or "", resp.content)
                raise status_error(answer, "WATCH", path)
            try:
                for line in resp.iter_lines(chunk_size=65536):
                    if not line:
                        continue
                    fit = typed is not None
                    try:
                        event = decode(line)
                    except msgspec.ValidationError:  # an ERROR's Status, or an odd field
                        event, fit = decode_any(line), False
                    except msgspec.DecodeError as exc:
                        raise KubernetesError(f"WATCH {path}: event is not JSON") from exc
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        code = obj.get("code") if isinstance(obj, dict) else None
                        raise KubernetesError(
                            f"WATCH {path}: {code} {obj.get('reason')}: {obj.get('message')}",
                            status=code if isinstance(code, int) else None,
                            reason=obj.get("reason"),
                        )
                    if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                        raise KubernetesError(f"WATCH {path}: unknown event type {kind!r}")
                    if kind != "BOOKMARK":
                        if typed is not None and fit:
                            obj = typed.finish(obj) if typed.finish is not None else obj
                        elif typed is not None:
                            obj = typed.fallback(obj)
                        elif plain is not None:
                            obj = plain(obj)
                    yield str(kind), obj
            except requests.RequestException as exc:
                raise KubernetesError(f"WATCH {path}: {exc}") from exc

    def patch(
        self, path: str, body: Any, patch_type: str = "merge", *, view: ItemView | None = None
    ) -> Obj:
        """``patch_type``: merge (RFC 7386), strategic, or json (RFC 6902).
        ``view``: the patched object is returned cut to it (as a LIST's
        items are), not in full."""
        return self.request(
            "PATCH", path, body=body, content_type=PATCH_TYPES[patch_type], answer_view=view
        )

    def create(self, path: str, body: Obj) -> Obj:
        return self.request("POST", path, body=body)

    def replace(self, path: str, body: Obj) -> Obj:
        """PUT; the server answers 409 when ``metadata.resourceVersion`` is stale."""
        return self.request("PUT", path, body=body)

    def delete(self, path: str) -> Obj:
        return self.request("DELETE", path)

    def close(self) -> None:
        self.session.close()
        if self._transport is not None:
            self._transport.close()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None


def _is_object_path(path: str) -> bool:
    """True for ``.../nodes/n1``, False for collections like ``.../nodes``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if not parts:
        return True
    # /api/v1/<plural>[/<name>] or /api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    return len(rest) >= 2
