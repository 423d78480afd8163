"""Small helpers the operator commands share: config loading, the Slurm
client, colour, and turning our errors into exit codes when a command is
invoked on its own (tests call ``command`` directly, without the group)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from slurm_hooks.core.errors import ConfigError, SlurmHooksError, SlurmUnavailable
from slurm_hooks.core.exits import (  # noqa: F401 (re-exported: importable from here too)
    EXIT_ERROR,
    EXIT_OK,
    EXIT_UNHEALTHY,
)

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
            if isinstance(exc, SlurmUnavailable):
                conf = os.environ.get("SLURM_CONF") or "unset, Slurm's built-in path"
                click.echo(f"slurm-hooks: {UNREACHABLE_HINT.format(conf=conf)}", err=True)
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


#: Seconds an operator command may wait for Slurm in all (every call,
#: attempt and backoff together) before it says what to check: with the
#: interpreter's start and the config, the answer comes within 10 s.
INTERACTIVE_DEADLINE_S = 9.0
#: What to check when the controller does not answer an operator command.
UNREACHABLE_HINT = (
    "check: slurmctld is running on SlurmctldHost ('scontrol ping'), SLURM_CONF "
    "names this cluster's slurm.conf (now: {conf}), munge runs here and on the "
    "controller, and SlurmctldPort is reachable from this host"
)


_CONF_HINT = (
    " (set SLURM_CONF to this cluster's slurm.conf, or unset it for Slurm's "
    "built-in path or configless mode)"
)


def check_slurm_conf(environ: Mapping[str, str] | None = None) -> str | None:
    """The slurm.conf that ``SLURM_CONF`` names, checked before any Slurm
    command runs: a file that is missing or unreadable is a ConfigError
    naming it (scontrol itself would retry reading it for 60 s).  None when
    SLURM_CONF is not set (Slurm's built-in path, or configless mode)."""
    env = os.environ if environ is None else environ
    conf = env.get("SLURM_CONF")
    if not conf:
        return None
    if not os.path.isfile(conf):
        why = "is not a file" if os.path.exists(conf) else "does not exist"
        raise ConfigError(f"{conf} {why}{_CONF_HINT}", key="SLURM_CONF")
    if not os.access(conf, os.R_OK):
        raise ConfigError(f"{conf} cannot be read by this user{_CONF_HINT}", key="SLURM_CONF")
    return conf


def slurm_client(cfg: Any) -> Any:
    """A SlurmClient for ``[general] slurm_backend``, built as the hooks build
    theirs (so ``slurm-hooks status`` works from an admin host through
    slurmrestd), for a person waiting at a terminal: the command-line
    backend checks SLURM_CONF first and gives up on an unreachable
    controller within :data:`INTERACTIVE_DEADLINE_S` in all."""
    from slurm_hooks.slurm import factory

    if cfg.general.slurm_backend != "cli":
        return factory.client_from_config(cfg)
    check_slurm_conf()
    return factory.client_from_config(cfg, deadline_s=INTERACTIVE_DEADLINE_S)
