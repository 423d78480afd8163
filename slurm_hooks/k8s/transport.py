"""Keep-alive HTTP/1.1 to one API server: the plumbing under ``KubeClient``.

Why not urllib3's pool: at 50,000 nodes a cold incident pass makes ~1,600
small calls (a cordon PATCH, a replacement POST, a record PATCH per new
incident, LIST pages), and urllib3's per-call machinery (pool-key
normalisation, ``Timeout`` objects, its own request writer and response
wrapper) cost about 0.4 ms of CPU per call on top of
``http.client``, which urllib3 itself drives underneath: more than half of
the pass (bench/bench_bridge.py).  This module drives ``http.client``
straight and keeps what matters from urllib3:

* the retry policy is urllib3's ``Retry`` object, used as urllib3 uses it
  (``is_retry``, ``increment``, ``sleep``): connection failures retried for
  every verb, a failure after the request went out only for the methods the
  policy allows, 429/5xx answers with backoff and ``Retry-After``;
* failures are urllib3's exception types (``NewConnectionError``,
  ``ReadTimeoutError``, ``ProtocolError``, ``SSLError``, ``MaxRetryError``),
  so ``KubeClient`` turns them into the same errors as before;
* an idle connection is checked before reuse (``wait_for_read``: a server
  that closed it shows as readable), as urllib3's pool does.

TLS: verification is always on (``ssl.create_default_context``: the
certificate chain and the host name), with the cluster's CA and an optional
client certificate.  Proxies are not handled here: ``KubeClient`` leaves a
server behind a proxy to requests.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util.retry import Retry
from urllib3.util.wait import wait_for_read

log = logging.getLogger(__name__)

#: Idle connections kept for reuse (calls are sequential in a pass; the
#: lease renewal may overlap one).
MAX_IDLE = 8


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read in full."""

    status: int
    reason: str
    content: bytes


class Transport:
    """Sends requests to ``server`` (``http://`` or ``https://host[:port]``)
    over a few kept-alive connections."""

    def __init__(
        self,
        server: str,
        *,
        timeout: float,
        retry: Retry,
        ca_file: str | None = None,
        ca_dir: str | None = None,
        client_cert: tuple[str, str | None] | None = None,
    ) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) server URL: {server!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        #: A server URL's own path (an API behind a path-routing proxy).
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.retry = retry
        self._context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            ctx = ssl.create_default_context(cafile=ca_file, capath=ca_dir)
            if client_cert is not None:
                ctx.load_cert_chain(client_cert[0], client_cert[1])
            self._context = ctx
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def __str__(self) -> str:
        # urllib3's pool errors print their pool: keep the messages readable.
        return f"KubeTransport(host={self.host!r}, port={self.port})"

    # -- connections ----------------------------------------------------------

    def _take(self) -> http.client.HTTPConnection:
        """An idle connection the server has not closed, else a new one
        (not yet connected)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            sock = conn.sock
            if sock is not None and not wait_for_read(sock, timeout=0.0):
                return conn
            conn.close()
        if self._context is not None:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self._context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- one call -------------------------------------------------------------

    def send(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        """``target``: path and query under the server URL.  Retries as
        ``self.retry`` says; the last answer when the status retries run
        out (urllib3's ``raise_on_status=False``), urllib3's errors
        otherwise."""
        target = (self.prefix + target) or "/"
        retries = self.retry
        while True:
            try:
                answer, retry_after = self._once(method, target, body, headers)
            except (ConnectTimeoutError, ReadTimeoutError, ProtocolError, SSLError) as exc:
                retries = retries.increment(method, target, error=exc, _pool=self._as_pool())
                log.debug("%s %s: %s, retrying", method, target, exc)
                retries.sleep()
                continue
            if not retries.is_retry(method, answer.status, retry_after is not None):
                return answer
            response = urllib3.HTTPResponse(
                body=b"",
                headers={"Retry-After": retry_after} if retry_after is not None else {},
                status=answer.status,
                reason=answer.reason,
                preload_content=False,
            )
            try:
                retries = retries.increment(method, target, response=response)
            except MaxRetryError:
                if retries.raise_on_status:
                    raise
                return answer
            log.debug("%s %s: %s, retrying", method, target, answer.status)
            retries.sleep(response)

    def _once(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[Answer, str | None]:
        conn = self._take()
        if conn.sock is None:
            self._connect(conn)
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            content = resp.read()
        except TimeoutError as exc:
            conn.close()
            raise ReadTimeoutError(
                self._as_pool(), target, f"Read timed out. (read timeout={self.timeout})"
            ) from exc
        except ssl.SSLError as exc:
            conn.close()
            raise SSLError(exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ProtocolError("Connection aborted.", exc) from exc
        if resp.will_close:
            conn.close()
        else:
            self._give(conn)
        answer = Answer(resp.status, resp.reason or "", content)
        # Read only where the retry policy can look at it (a header look-up
        # is a walk of the parsed headers, on every one of ~1,600 calls).
        retry = self.retry
        if resp.status in retry.RETRY_AFTER_STATUS_CODES or (
            retry.status_forcelist and resp.status in retry.status_forcelist
        ):
            return answer, resp.getheader("Retry-After")
        return answer, None

    def _connect(self, conn: http.client.HTTPConnection) -> None:
        """Connect now, so a failure here is told apart from one after the
        request went out (only this kind is retried for every verb)."""
        try:
            conn.connect()
        except ssl.SSLError as exc:
            conn.close()
            raise SSLError(exc) from exc
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeoutError(
                f"Connection to {self.host} timed out. (connect timeout={self.timeout})"
            ) from exc
        except OSError as exc:
            conn.close()
            raise NewConnectionError(
                cast(Any, self), f"Failed to establish a new connection: {exc}"
            ) from exc

    def _as_pool(self) -> Any:
        """What urllib3's errors name as their pool (only printed)."""
        return self
