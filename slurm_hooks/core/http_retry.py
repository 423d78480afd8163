"""One HTTP retry policy for every client we build (Kubernetes, slurmrestd,
the alert webhook, the replacement webhook).

Each client used to spell out urllib3's ``Retry`` on its own; they differ
only in which methods are safe to repeat, which answers are transient and
how long they may back off, so those are the arguments and the rest is
decided here once: every kind of failure (connect, read, status) is capped
by the same count, ``Retry-After`` is honoured, and the last answer is
handed back rather than raised (the caller turns it into a typed error).

urllib3 and requests are imported when a policy is built, not when this
module is: the hook path imports ``core`` and never speaks HTTP.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests
    from urllib3.util.retry import Retry

#: Answers worth another try: too many requests, and the server-side 5xx
#: that a restart or a load balancer gives.
TRANSIENT_STATUSES: tuple[int, ...] = (429, 500, 502, 503, 504)


def retry_policy(
    retries: int,
    *,
    backoff: float,
    methods: Iterable[str],
    statuses: Collection[int] = TRANSIENT_STATUSES,
    backoff_max: float | None = None,
) -> Retry:
    """urllib3's ``Retry`` for ``retries`` more tries of ``methods``, sleeping
    ``backoff`` * 2**n between them (at most ``backoff_max`` seconds, else
    urllib3's own ceiling)."""
    from urllib3.util.retry import Retry

    ceiling: dict[str, Any] = {} if backoff_max is None else {"backoff_max": backoff_max}
    return Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=backoff,
        status_forcelist=tuple(statuses),
        allowed_methods=frozenset(methods),
        respect_retry_after_header=True,
        raise_on_status=False,
        **ceiling,
    )


def mount_retry(session: requests.Session, retry: Retry, *, pool_maxsize: int = 10) -> None:
    """Every ``http://`` and ``https://`` call of ``session`` goes through one
    adapter that applies ``retry`` (``pool_maxsize``: requests' default)."""
    from requests.adapters import HTTPAdapter

    adapter = HTTPAdapter(max_retries=retry, pool_maxsize=pool_maxsize)
    session.mount("https://", adapter)
    session.mount("http://", adapter)


__all__ = ["TRANSIENT_STATUSES", "mount_retry", "retry_policy"]
