"""README: "Every command has --help with an example" - walk every command and
subcommand of the real entry point and check."""

from __future__ import annotations

import click
from click.testing import CliRunner

from slurm_hooks.cli import main


def _walk(cmd: click.Command, path: list[str]):
    yield path, cmd
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name])


def test_every_command_help_has_an_example():
    missing = []
    seen = 0
    for path, _cmd in _walk(main, []):
        if not path:
            continue
        seen += 1
        r = CliRunner().invoke(main, [*path, "--help"])
        assert r.exit_code == 0, (path, r.output)
        body = r.output.split("Options:")[0]
        example = [ln for ln in body.splitlines() if ln.strip().startswith("Example")]
        after = body.split(example[0], 1)[1] if example else ""
        if not example or "slurm-hooks" not in after and "gpu_burn" not in after:
            missing.append(" ".join(path))
    assert seen >= 20
    assert missing == []
