"""config.GeneralConfig: ``[general]`` is validated on load, errors name the key."""

from __future__ import annotations

import pytest

from slurm_hooks.core import config
from slurm_hooks.core.errors import ConfigError


@pytest.mark.parametrize("level", ["DEBUG", "info", "Warning", "ERROR", "CRITICAL"])
def test_log_level_accepts_logging_level_names(level: str) -> None:
    cfg = config.parse(f'[general]\nlog_level = "{level}"\n')
    assert cfg.general.log_level == level


@pytest.mark.parametrize("level", ["LOUD", "", "10", "verbose"])
def test_log_level_refuses_anything_else(level: str) -> None:
    with pytest.raises(ConfigError, match=r"c\.toml:general: log_level must be a logging level"):
        config.parse(f'[general]\nlog_level = "{level}"\n', path="c.toml")
