"""Reading API answers: item views that keep only part of each object,
Status answers turned into our exceptions, and transport errors as the one
kind (requests') that callers catch.

``ItemView`` lets a caller decode listed or watched items straight into a
TypedDict, so fields it does not name are skipped by the parser, never
built; the decoders are built once per view and kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict, cast

import msgspec
import requests
import urllib3

from slurm_hooks.core.errors import ConflictError, KubernetesError
from slurm_hooks.k8s.transport import Answer

Obj = dict[str, Any]

decode_any = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class ItemView:
    """How a caller keeps only part of each listed or watched item.

    ``schema`` is a TypedDict (nested TypedDicts for nested maps): each item
    is decoded straight into it, so fields it does not name are skipped by
    the parser, never built.  ``finish`` then adjusts each decoded item (in
    place or not).  ``fallback`` maps a fully decoded item to the same view:
    used when an answer does not fit ``schema`` (a field of an unexpected
    type), so a view never fails where the plain decode would not."""

    schema: Any
    fallback: Callable[[Obj], Obj]
    finish: Callable[[Obj], Obj] | None = None


#: TypedDict's functional form, for the page and event types built around a
#: view's schema at run time (static checkers cannot follow those).
_typed_dict = cast(Any, TypedDict)
_list_of = cast(Any, list).__class_getitem__

_page_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_event_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_item_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def page_decoder(view: ItemView) -> msgspec.json.Decoder[Any]:
    dec = _page_decoders.get(view.schema)
    if dec is None:
        page = _typed_dict(
            "Page", {"metadata": dict[str, Any], "items": _list_of(view.schema) | None}, total=False
        )
        dec = _page_decoders[view.schema] = msgspec.json.Decoder(page)
    return dec


def item_decoder(view: ItemView) -> msgspec.json.Decoder[Any]:
    dec = _item_decoders.get(view.schema)
    if dec is None:
        dec = _item_decoders[view.schema] = msgspec.json.Decoder(view.schema)
    return dec


def event_decoder(view: ItemView) -> msgspec.json.Decoder[Any]:
    dec = _event_decoders.get(view.schema)
    if dec is None:
        event = _typed_dict("Event", {"type": str, "object": view.schema}, total=False)
        dec = _event_decoders[view.schema] = msgspec.json.Decoder(event)
    return dec


def apply_view(items: list[Any], view: Callable[[Obj], Obj] | ItemView | None) -> list[Any]:
    """Items decoded in full, cut to ``view``."""
    if view is None:
        return items
    fn = view.fallback if isinstance(view, ItemView) else view
    return [fn(i) for i in items]


def status_error(answer: Answer, method: str, path: str) -> KubernetesError:
    """Turn an error answer into our exception, keeping the Status fields."""
    reason: str | None = None
    message = answer.content[:300].decode("utf-8", "replace")
    try:
        body = decode_any(answer.content)
    except msgspec.DecodeError:
        body = None
    if isinstance(body, dict) and body.get("kind") == "Status":
        reason = body.get("reason") or None
        message = body.get("message") or message
    text = f"{method} {path}: {answer.status} {reason or answer.reason}: {message}"
    cls = ConflictError if answer.status == 409 else KubernetesError
    return cls(text, status=answer.status, reason=reason)


def as_requests_error(exc: urllib3.exceptions.HTTPError) -> requests.RequestException:
    """The requests exception that requests' own adapter raises for this
    urllib3 error: callers see one kind of transport error whichever path
    made the call (the urllib3 error stays chained as its cause)."""
    u3 = urllib3.exceptions
    reason = getattr(exc, "reason", None)
    cls: type[requests.RequestException] = requests.ConnectionError
    if isinstance(exc, u3.ReadTimeoutError) or isinstance(reason, u3.ReadTimeoutError):
        cls = requests.ReadTimeout
    elif isinstance(exc, u3.ConnectTimeoutError) or isinstance(reason, u3.ConnectTimeoutError):
        cls = requests.ConnectTimeout
    elif isinstance(exc, u3.SSLError) or isinstance(reason, u3.SSLError):
        cls = requests.exceptions.SSLError
    elif isinstance(reason, u3.ResponseError):
        cls = requests.exceptions.RetryError
    err = cls(exc)
    err.__cause__ = exc
    return err
