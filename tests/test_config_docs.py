"""docs/configuration.md, ``config defaults`` and ``config show`` against the
dataclasses: every registered section and key is documented, the generated
reference is current, and what the CLI prints is a config that validates."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.cli import config_cmd
from slurm_hooks.cli import installer as install
from slurm_hooks.core import config

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "tools/gen_config_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_tables(text: str) -> dict[str, set[str]]:
    """Table name -> keys, from the reference's headings and table rows."""
    tables: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if m := re.match(r"^### `\[(.+)\]`$", line):
            current = tables.setdefault(m.group(1), set())
        elif current is not None and (m := re.match(r"^\| `([^`]+)` \|", line)):
            current.add(m.group(1))
    return tables


def _expected_tables() -> dict[str, set[str]]:
    """Every TOML table and key the registered sections accept, walked from
    the dataclasses here, independently of the generator."""
    from slurm_hooks.detect.checks.base import COMMON_SETTINGS
    from slurm_hooks.detect.checks.registry import CHECKS, load_class
    from slurm_hooks.detect.checks.settings import ChecksConfig, settings_class
    from slurm_hooks.detect.profiles import IbExpect, Profile, Profiles
    from slurm_hooks.detect.xid.settings import XidSettings

    #: Checks that validate their table at run time (no settings_class).
    runtime_validated = {"xid": XidSettings}
    out: dict[str, set[str]] = {}

    def walk(name: str, cls: type, skip: tuple[str, ...] = ()) -> None:
        hints = typing.get_type_hints(cls)
        keys = out.setdefault(name, set())
        for f in dataclasses.fields(cls):
            if not f.init or f.name in skip:
                continue
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                walk(f"{name}.{f.name}", tp)
                continue
            args = typing.get_args(tp)
            if typing.get_origin(tp) in (Mapping, dict) and dataclasses.is_dataclass(args[1]):
                walk(f"{name}.{f.name}.<name>", args[1])
            keys.add(f.name)

    for section, spec in config.SECTIONS.items():
        cls = config._resolve(spec)
        if cls is ChecksConfig:
            out[section] = {f.name for f in dataclasses.fields(cls)} - {"tables", "path"}
            for check, cspec in CHECKS.items():
                target = settings_class(load_class(cspec))
                if target is False:
                    target = runtime_validated[check]
                out[f"{section}.{check}"] = set(COMMON_SETTINGS)
                if target is not None:
                    walk(f"{section}.{check}", target, skip=tuple(COMMON_SETTINGS))
        elif cls is Profiles:
            out[section] = set()
            walk(f"{section}.<name>", Profile, skip=("name", "ib"))
            walk(f"{section}.<name>.ib", IbExpect)
        else:
            walk(section, cls)
    return out


def test_reference_is_generated_from_the_current_code():
    gen = _generator()
    text = DOC.read_text(encoding="utf-8")
    assert gen.BEGIN in text and gen.END in text
    assert gen.update(text) == text, "docs/configuration.md is stale: run tools/gen_config_docs.py"
    assert gen.render() == gen.render()  # deterministic


def test_every_key_of_every_section_is_in_the_reference():
    documented = _doc_tables(DOC.read_text(encoding="utf-8"))
    expected = _expected_tables()
    assert set(documented) == set(expected), "tables documented vs accepted differ"
    for table, keys in expected.items():
        assert keys <= documented[table], (
            f"[{table}] undocumented: {sorted(keys - documented[table])}"
        )
        assert documented[table] <= keys, f"[{table}] stale: {sorted(documented[table] - keys)}"


def _uncomment(text: str, *, templates: str | None) -> str:
    """Every ``# [table]`` and ``# key = value`` line of the defaults file,
    uncommented; tables named ``<name>`` get ``templates`` as name, or are
    left out when it is None."""
    out, skipping = [], False
    for line in text.splitlines():
        if m := re.match(r"^# \[([A-Za-z0-9_.<>-]+)\]$", line):
            skipping = "<name>" in m.group(1) and templates is None
            if not skipping:
                out.append(f"[{m.group(1).replace('<name>', templates or '')}]")
            continue
        m = re.match(r"^# ([A-Za-z0-9_-]+) = (.*)$", line)
        if m and not skipping:
            try:
                tomllib.loads(f"k = {m.group(2)}")
            except tomllib.TOMLDecodeError:
                continue  # "(unset)"
            out.append(f"{m.group(1)} = {m.group(2)}")
    return "\n".join(out) + "\n"


def test_config_defaults_prints_every_section_and_table():
    r = CliRunner().invoke(config_cmd.command, ["defaults"])
    assert r.exit_code == 0, r.output
    assert r.output == install.default_config_text()
    headers = set(re.findall(r"^# \[([^\]]+)\]$", r.output, flags=re.M))
    assert set(config.SECTIONS) <= headers
    assert headers == set(_expected_tables())
    assert config.parse(r.output).data == {}  # all commented out: changes nothing


def test_uncommented_defaults_validate_and_change_nothing():
    text = install.default_config_text()
    plain = config.parse(_uncomment(text, templates=None), path="defaults.toml")
    empty = config.parse("")
    classes, broken = install.resolve_sections()
    assert not broken
    for name, cls in classes.items():
        assert name in plain.data
        got = install.render_table(name, plain.section(name, cls))
        assert got == install.render_table(name, empty.section(name, cls)), name
    # With the <name> tables filled in, it still validates.
    named = config.parse(_uncomment(text, templates="XID13"))
    assert named.data["policy"]["repeat"]["XID13"]["count"] == 3
    assert "XID13" in named.data["profiles"]


def test_config_show_is_a_valid_config_with_the_files_values(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        "[checks]\nbudget_s = { healthcheck = 20 }\n"
        "[checks.burnin]\nduration_s = 7\n[checks.pcie]\nenabled = false\n"
        '[checks.xid]\nsource = "journal"\n'
        "[policy.repeat.XID13]\ncount = 2\n"
        '[profiles.h100]\nnodes = "gpu[001-004]"\ngpu_count = 8\n[profiles.h100.ib]\ncount = 4\n'
    )
    r = CliRunner().invoke(config_cmd.command, ["show", "-c", str(f)])
    assert r.exit_code == 0, r.output
    shown = config.parse(r.output)  # validates
    data = shown.data
    assert data["checks"]["budget_s"]["healthcheck"] == 20.0
    assert data["checks"]["budget_s"]["acceptance"] == 1800.0
    assert data["checks"]["burnin"]["duration_s"] == 7.0
    assert data["checks"]["pcie"]["enabled"] is False
    assert data["checks"]["xid"]["source"] == "journal"
    assert data["checks"]["mounts"]["timeout_s"] == 15.0
    assert "tables" not in data["checks"] and "path" not in data["checks"]
    assert data["policy"]["repeat"]["XID13"]["count"] == 2
    assert data["profiles"]["h100"]["gpu_count"] == 8
    assert data["profiles"]["h100"]["ib"]["count"] == 4
    assert "profiles" not in data["profiles"]


def _toml_blocks(path: Path) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def test_minimal_production_example_validates():
    text = DOC.read_text(encoding="utf-8")
    after = text[text.index("Minimal production example") :]
    block = re.search(r"```toml\n(.*?)```", after, flags=re.S).group(1)
    cfg = config.parse(block, path="example.toml")
    assert set(cfg.data) >= {"general", "policy", "notify", "metrics"}


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_toml_example_in_the_docs_validates(doc):
    for block in _toml_blocks(doc):
        config.parse(block, path=f"{doc.name} example")
