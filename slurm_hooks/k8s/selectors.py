"""Kubernetes label and field selectors, shared by the planner (which pods
are slurmd pods) and the API stand-in (LIST filtering, PDB matching)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REQ_RE = re.compile(
    r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*(\S*)|\s+(in|notin)\s*\((.*)\))?\s*$"
)
_FIELD_RE = re.compile(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$")


def split_selector(sel: str) -> list[str]:
    """Split on commas outside parentheses (``a in (x,y),b``)."""
    parts, depth, cur = [], 0, ""
    for ch in sel:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    """The string syntax: =, ==, !=, in, notin, key (exists), !key.  Raises
    ValueError for a requirement it cannot parse."""
    for req in split_selector(selector):
        m = _REQ_RE.match(req)
        if not m:
            raise ValueError(f"unable to parse requirement: {req!r}")
        neg, key, op, value, setop, values = m.groups()
        if setop:
            vals = {v.strip() for v in values.split(",")}
            if setop == "in" and labels.get(key) not in vals:
                return False
            if setop == "notin" and key in labels and labels[key] in vals:
                return False
        elif op:
            if op in ("=", "==") and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        elif neg:
            if key in labels:
                return False
        elif key not in labels:
            return False
    return True


def _field(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return "" if cur is None else str(cur)


def field_selector_matches(selector: str, obj: Mapping[str, Any]) -> bool:
    """``spec.nodeName=x,status.phase!=Succeeded``."""
    for req in split_selector(selector):
        m = _FIELD_RE.match(req)
        if not m:
            raise ValueError(f"invalid field selector: {req!r}")
        path, op, value = m.groups()
        if (_field(obj, path) == value) != (op != "!="):
            return False
    return True


def selector_object_matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector object (matchLabels, matchExpressions).  An
    empty selector matches everything (policy/v1 PDB semantics)."""
    if not sel:
        return True
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for ex in sel.get("matchExpressions") or []:
        key, op, vals = ex["key"], ex["operator"], set(ex.get("values") or [])
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
