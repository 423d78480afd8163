"""Import circles in the product, counting imports inside functions and under
``TYPE_CHECKING`` (which import-linter's contracts leave out): none (issue
29), and a list of known ones that stays empty."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "slurm_hooks"

#: Circles known today: none (issue 29 opened the last ones: agent/hook and
#: agent/prolog, detect/fold and detect/runner, bridge/service and
#: bridge/slinky_exec).  Never add one.
KNOWN: list[set[str]] = []


def graph() -> dict[str, set[str]]:
    paths = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        paths[".".join(parts)] = p
    edges: dict[str, set[str]] = {m: set() for m in paths}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    for mod, p in paths.items():
        pkg = mod if p.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                         for a in node.names]  # fmt: skip
            for n in names:
                target = resolve(n) if n.startswith("slurm_hooks") else None
                if target and target != mod:
                    edges[mod].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_new_import_circle():
    found = circles(graph())
    new = [sorted(c) for c in found if c not in KNOWN]
    assert new == [], "a new import circle (or a known one grew)"


def test_the_known_list_only_shrinks():
    found = circles(graph())
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert gone == [], "this circle is open now: remove it from KNOWN"


def test_the_engine_circle_is_gone_and_would_be_seen():
    edges = graph()
    assert not any("slurm_hooks.act.engine" in c for c in circles(edges))
    edges["slurm_hooks.act.deferred"].add("slurm_hooks.act.engine")  # as before issue 29
    assert any({"slurm_hooks.act.engine", "slurm_hooks.act.deferred"} <= c for c in circles(edges))
