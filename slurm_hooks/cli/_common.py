"""Small helpers the operator commands share: config loading, the Slurm
client, colour, and turning our errors into exit codes when a command is
invoked on its own (tests call ``command`` directly, without the group)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from slurm_hooks.core.errors import SlurmHooksError

EXIT_OK, EXIT_UNHEALTHY, EXIT_ERROR = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Config file (default: $SLURM_HOOKS_CONFIG, else /etc/slurm-hooks/config.toml).",
)


def exits_on_error(fn: F) -> F:
    """Print ``slurm-hooks: error: ...`` and exit with the error's code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SlurmHooksError as exc:
            click.echo(f"slurm-hooks: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def use_color() -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


_STYLES: dict[str, dict[str, Any]] = {
    "title": {"bold": True},
    "bad": {"fg": "red", "bold": True},
    "warn": {"fg": "yellow"},
    "ok": {"fg": "green"},
    "dim": {"dim": True},
}


def styled(text: str, style: str, color: bool) -> str:
    if not color or not style or style not in _STYLES:
        return text
    return click.style(text, **_STYLES[style])


def load_config(path: str | None) -> Any:
    from slurm_hooks.core import config

    return config.load(path)


def slurm_client(cfg: Any) -> Any:
    """A SlurmClient for ``[general] slurm_backend``, built as the hooks build
    theirs (so ``slurm-hooks status`` works from an admin host through
    slurmrestd)."""
    from slurm_hooks.slurm import factory

    return factory.client_from_config(cfg)
