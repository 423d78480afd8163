"""The shape the incident's rooms keep (docs/architecture.md), read from the
source with ``ast``: what import-linter cannot see (imports under
``TYPE_CHECKING``, which the contracts leave out) and what is not an import
at all (a call of a Slurm client's write method, an ``scontrol`` argv)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_actions import env, xid79  # noqa: F401 - env is a fixture

PACKAGE = Path(__file__).resolve().parent.parent / "slurm_hooks"

#: The SlurmClient methods that change Slurm (slurm/base.py): only
#: slurm/ (the door and the backends) calls them.
WRITE_METHODS = frozenset(
    {
        "drain", "resume", "down", "update_reason", "signal_job", "requeue", "cancel",
        "set_job_comment", "set_node_comment", "set_node_extra", "reboot",
    }
)  # fmt: skip
#: ``scontrol`` verbs that only read.
SCONTROL_READS = frozenset({"show", "ping", "version", "listpids", "token"})


def modules(folder: Path = PACKAGE) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (functions, TYPE_CHECKING)."""
    out: set[str] = set()
    pkg = module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    return out


def test_no_room_imports_the_engine():
    """Only the Engine sequences the rooms: no act/ module but engine.py
    imports act.engine, not even under TYPE_CHECKING or in a function."""
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in modules(PACKAGE / "act")
        if p.name != "engine.py" and "slurm_hooks.act.engine" in imported(p)
    ]
    assert offenders == []


def _as_someone_else(tree: ast.AST) -> set[int]:
    """ids of the calls made inside ``with <slurm>.as_actor(...)``: the
    replay's simulated people, NHC and slurmctld writing to its in-memory
    Slurm (slurm_hooks/simulate), never slurm-hooks itself."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
            isinstance(item.context_expr, ast.Call)
            and isinstance(item.context_expr.func, ast.Attribute)
            and item.context_expr.func.attr == "as_actor"
            for item in node.items
        ):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def write_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls of a Slurm client's write method on anything but the door."""
    out = []
    others = _as_someone_else(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if id(node) in others:
            continue
        if node.func.attr not in WRITE_METHODS:
            continue
        receiver = node.func.value
        through_door = (
            (isinstance(receiver, ast.Attribute) and receiver.attr == "door")
            or (isinstance(receiver, ast.Name) and receiver.id == "door")
            or (
                isinstance(receiver, ast.Call)
                and isinstance(receiver.func, ast.Name)
                and receiver.func.id == "SlurmDoor"
            )
        )
        if not through_door:
            out.append((node.lineno, f"{ast.unparse(receiver)}.{node.func.attr}()"))
    return out


def slurm_write_argvs(tree: ast.AST) -> list[tuple[int, str]]:
    """argv lists that would change Slurm: ``scancel ...``, ``scontrol <write>``."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.List) or not node.elts:
            continue
        words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts[:2]]
        if words[0] == "scancel" or (
            words[0] == "scontrol" and (len(words) < 2 or words[1] not in SCONTROL_READS)
        ):
            out.append((node.lineno, " ".join(str(w) for w in words)))
    return out


def outside_slurm() -> list[Path]:
    return [p for p in modules() if p.relative_to(PACKAGE).parts[0] != "slurm"]


def test_every_slurm_write_goes_through_the_door():
    found = {
        str(p.relative_to(PACKAGE)): hits
        for p in outside_slurm()
        if (
            hits := write_calls(ast.parse(p.read_text()))
            + slurm_write_argvs(ast.parse(p.read_text()))
        )
    }
    assert found == {}


@pytest.mark.parametrize(
    "src",
    [
        "engine.slurm.requeue(job)",
        "client.drain(n, r)",
        "run(['scontrol', 'update', 'nodename=n1'])",
        "run(['scancel', '7'])",
        "run(['scontrol', 'create', 'reservation'])",
    ],
)
def test_the_door_check_sees_a_write_that_bypasses_it(src):
    tree = ast.parse(src)
    assert write_calls(tree) or slurm_write_argvs(tree)


@pytest.mark.parametrize(
    "src",
    [
        "ctx.door.drain(n, r)",
        "SlurmDoor(client).requeue_once(j, 0)",
        "run(['scontrol', 'show', 'config'])",
    ],
)
def test_the_door_check_lets_reads_and_the_door_pass(src):
    tree = ast.parse(src)
    assert not write_calls(tree) and not slurm_write_argvs(tree)


def test_handle_decides_once_then_once_more_only_for_a_drain(env, monkeypatch):  # noqa: F811
    """The Slurm-free decision is made once per run and handed to the
    repeats and held rooms: with a drain memo and a held record on the node
    (each once made its own decision), a new fault costs two decide() calls,
    a log-only finding one."""
    from slurm_hooks.act import engine as engine_mod
    from slurm_hooks.act import held
    from slurm_hooks.core.model import Action, Component, Finding, Status
    from slurm_hooks.decide import PolicyConfig

    slurm, clock, _, make, _ = env
    policy = PolicyConfig(grace_seconds=60, breaker_max_share=1.0, breaker_max_nodes=10)
    make(policy).handle("n1", [xid79()])  # drained: a drain memo for XID79
    eng = make(policy)
    held.record(
        eng.state, "n1", code="XID94", component="gpu1", incident=None, partition="gpu",
        message="held", now=clock(), marked=False,
    )  # fmt: skip
    calls = []
    real = engine_mod.decide
    monkeypatch.setattr(engine_mod, "decide", lambda *a, **k: calls.append(1) or real(*a, **k))
    dbe = Finding("xid", Status.FAIL, "XID48", "DBE", Component("gpu", 1), Action.RESET_GPU)
    eng.handle("n1", [dbe])
    assert len(calls) == 2
    calls.clear()
    log_only = Finding(
        "xid", Status.WARN, "XID13", "gr exc", Component("gpu", 0), Action.RESTART_APP
    )
    eng.handle("n1", [log_only])
    assert len(calls) == 1


#: Issue 29's sizes: a module a newcomer can read whole, a step of the
#: incident's life that fits a screen, the engine as construction and sequencing.
MODULE_MAX_LINES = 600
ACT_FUNCTION_MAX_LINES = 80
ENGINE_MAX_LINES = 450


def _lines(path: Path) -> int:
    return path.read_text().count("\n")


def test_no_module_outgrows_a_reading():
    big = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
           if (n := _lines(p)) > MODULE_MAX_LINES}  # fmt: skip
    assert big == {}
    assert _lines(PACKAGE / "act" / "engine.py") <= ENGINE_MAX_LINES


def test_no_step_of_act_outgrows_a_screen():
    long = []
    for path in (PACKAGE / "act").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > ACT_FUNCTION_MAX_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.name} {n}")
    assert long == []
