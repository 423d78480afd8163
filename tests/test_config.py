"""config.GeneralConfig: ``[general]`` is validated on load, errors name the key."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# The rule for which numbers must be > 0, in (0, 1] or a port, as it was
# written before it became plain string tests (so a hook start compiles no
# regular expression for it): the two must agree on every key.
_POSITIVE_RE = re.compile(
    r"timeout|interval|window|budget|validity|retry_s|retry_max_s|lease_duration|refeed"
    r"|^iters$|reservation_minutes|_min_|_tflops|_gbps|memory_gb|_temp_"
)


def _bounds_by_regex(key: str, integer: bool) -> config.Bounds:
    name = key.rsplit(".", 1)[-1].split("[", 1)[0]
    parts = [p.split("[", 1)[0] for p in key.split(".")]
    high = float(config.MAX_INT) if integer else config.MAX_NUMBER
    if re.search(r"_port$", name):
        return config.Bounds(0, 65535)
    if re.search(r"(?:_fraction|_share)$", name):
        return config.Bounds(0, 1, low_open=True)
    if any(_POSITIVE_RE.search(p) for p in parts[1:] or parts):
        return config.Bounds(0, high, low_open=True)
    return config.Bounds(0, high)


_WORDS = ["timeout", "iters", "port", "share", "fraction", "min", "temp", "gbps", "retry", "s"]
_KEYS = st.lists(
    st.one_of(st.sampled_from(_WORDS), st.text(alphabet="_.[]0\nabimnoprstu", max_size=8)),
    min_size=1,
    max_size=5,
).map("_".join)


@given(
    key=st.one_of(_KEYS, st.lists(_KEYS, min_size=1, max_size=3).map(".".join)),
    integer=st.booleans(),
)
def test_default_bounds_keeps_the_rule_it_had(key: str, integer: bool) -> None:
    assert config.default_bounds(key, integer=integer) == _bounds_by_regex(key, integer)


@pytest.mark.parametrize(
    "key, low_open, high",
    [
        ("checks.xid.journal_timeout", True, config.MAX_NUMBER),
        ("bridge.listen_port", False, 65535),
        ("bridge.max_share", True, 1),
        ("bridge.max_share\n", True, 1),
        ("acceptance.iters", True, config.MAX_NUMBER),
        ("acceptance.iters\n", True, config.MAX_NUMBER),
        ("acceptance.iterations", False, config.MAX_NUMBER),
        ("checks.ecc.max_sbe", False, config.MAX_NUMBER),
    ],
)
def test_default_bounds_by_name(key: str, low_open: bool, high: float) -> None:
    b = config.default_bounds(key)
    assert (b.low_open, b.high) == (low_open, high)
