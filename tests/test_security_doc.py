"""docs/security.md: every row of its tables names a test, and every test it
names exists (the threat model is only as good as the proof of each row)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs/security.md"
_REF = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def _rows() -> list[str]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append(line)
    return rows


def test_every_row_names_a_test():
    body = [r for r in _rows() if not r.startswith(("| Input ", "| File ", "| Trusted "))]
    assert len(body) > 15
    missing = [r for r in body if r.count("|") > 4 and not _REF.search(r)]
    assert not missing, missing


def test_every_named_test_exists():
    refs = _REF.findall(DOC.read_text(encoding="utf-8"))
    assert refs
    for path, name in refs:
        text = (ROOT / path).read_text(encoding="utf-8")
        if name:
            assert re.search(rf"^def {name}\(", text, re.M), f"{path}::{name}"
