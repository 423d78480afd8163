"""slurm.factory.client_from_config: one place turns ``[general]`` into a
SlurmClient, for the hooks, the grace worker, the admin CLI and the bridge.

The rest backend over HTTP is checked end to end against a loopback
stand-in for slurmrestd that answers ``GET /slurm/v0.0.38/nodes`` with the
recorded 22.05 answer (tests/data/slurm/22.05-rest-nodes.json)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_hooks.core import config as config_mod
from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.slurm import factory
from slurm_hooks.slurm.cli_backend import CliClient

DATA = Path(__file__).parent / "data" / "slurm"


def conf(tmp_path: Path, general: str, extra: str = "") -> config_mod.Config:
    path = tmp_path / "config.toml"
    path.write_text(f'[general]\nstate_dir = "{tmp_path}"\n{general}\n{extra}')
    return config_mod.load(path)


# -- the backends -----------------------------------------------------------


def test_cli_backend_takes_slurm_timeout(tmp_path):
    c = factory.client_from_config(conf(tmp_path, "slurm_timeout = 3.5"))
    assert type(c) is CliClient
    assert c.timeout == 3.5


def test_opts_win_over_the_config(tmp_path):
    c = factory.client_from_config(
        conf(tmp_path, "slurm_timeout = 3.5"), slurm_conf="/x/slurm.conf"
    )
    assert c._env["SLURM_CONF"] == "/x/slurm.conf"


def test_defaults_without_a_file_are_the_cli_backend():
    c = factory.client_from_config(config_mod.Config())
    assert type(c) is CliClient and c.timeout == 10.0


def test_rest_over_http_with_token_from_the_named_variable(tmp_path, monkeypatch):
    pytest.importorskip("requests")
    monkeypatch.setenv("MY_SLURM_JWT", "tok-123")
    cfg = conf(
        tmp_path,
        'slurm_backend = "rest"\nslurm_rest_url = "http://slurm.example:6820/"\n'
        'slurm_rest_user = "alice"\nslurm_rest_token_env = "MY_SLURM_JWT"\nslurm_timeout = 4',
    )
    c = factory.client_from_config(cfg)
    assert type(c).__name__ == "RestClient"
    assert c.base == "http://slurm.example:6820"
    assert c.timeout == 4.0
    assert c.session.headers["X-SLURM-USER-TOKEN"] == "tok-123"
    assert c.session.headers["X-SLURM-USER-NAME"] == "alice"


def test_rest_api_version_from_config(tmp_path):
    pytest.importorskip("requests")
    url = 'slurm_backend = "rest"\nslurm_rest_url = "http://slurm.example:6820"\n'
    # the default asks the server (on first use, so nothing is asked here)
    assert factory.client_from_config(conf(tmp_path, url))._api is None
    c = factory.client_from_config(conf(tmp_path, url + 'slurm_rest_api = "v0.0.42"'))
    assert c._url("nodes") == "http://slurm.example:6820/slurm/v0.0.42/nodes"
    with pytest.raises(ConfigError, match="general.slurm_rest_api"):
        conf(tmp_path, url + 'slurm_rest_api = "42"')


def test_rest_token_variable_unset_or_empty_sends_no_token(tmp_path, monkeypatch):
    pytest.importorskip("requests")
    monkeypatch.delenv("SLURM_JWT", raising=False)
    url = 'slurm_backend = "rest"\nslurm_rest_url = "http://slurm.example:6820"\n'
    c = factory.client_from_config(conf(tmp_path, url + 'slurm_rest_user = "alice"'))
    assert "X-SLURM-USER-TOKEN" not in c.session.headers
    assert "X-SLURM-USER-NAME" not in c.session.headers
    monkeypatch.setenv("SLURM_JWT", "tok")
    c = factory.client_from_config(conf(tmp_path, url + 'slurm_rest_token_env = ""'))
    assert "X-SLURM-USER-TOKEN" not in c.session.headers


def test_rest_over_a_unix_socket(tmp_path):
    pytest.importorskip("requests_unixsocket")
    sock = tmp_path / "slurmrestd.sock"
    cfg = conf(tmp_path, f'slurm_backend = "rest"\nslurm_rest_socket = "{sock}"')
    c = factory.client_from_config(cfg)
    assert c.base.startswith("http+unix://") and c.base.endswith("slurmrestd.sock")
    assert "X-SLURM-USER-TOKEN" not in c.session.headers


def test_pyslurm_backend_is_asked_for_with_the_timeout(tmp_path, monkeypatch):
    """pyslurm is not installed here: check what the factory asks the backend
    for rather than the backend itself (tests/test_slurm_pyslurm_backend.py)."""
    seen = {}

    def fake_get_client(backend, **opts):
        seen.update(opts, backend=backend)
        return "client"

    monkeypatch.setattr(factory, "get_client", fake_get_client)
    cfg = conf(tmp_path, 'slurm_backend = "pyslurm"\nslurm_timeout = 7')
    assert factory.client_from_config(cfg) == "client"
    assert seen == {"backend": "pyslurm", "timeout": 7.0}


# -- validation -------------------------------------------------------------


def test_rest_without_an_address_names_the_key(tmp_path):
    cfg = conf(tmp_path, 'slurm_backend = "rest"')
    with pytest.raises(ConfigError) as err:
        factory.client_from_config(cfg)
    assert err.value.key == "general.slurm_rest_url"
    assert str(err.value).startswith(f"{cfg.path}:general.slurm_rest_url: ")
    assert "slurm_rest_socket" in str(err.value)
    assert "socket=" not in str(err.value)


@pytest.mark.parametrize(
    ("general", "key", "words"),
    [
        (
            'slurm_rest_url = "http://h:6820"\nslurm_rest_socket = "/run/s.sock"',
            "general.slurm_rest_url",
            "not both",
        ),
        ('slurm_rest_url = "h:6820"', "general.slurm_rest_url", "http:// or https://"),
        ('slurm_rest_socket = "run/s.sock"', "general.slurm_rest_socket", "absolute path"),
        ('slurm_backend = "slurmrestd"', "general.slurm_backend", "cli, rest, pyslurm"),
    ],
)
def test_invalid_general_keys_are_refused_on_load(tmp_path, general, key, words):
    path = tmp_path / "config.toml"
    path.write_text(f"[general]\n{general}\n")
    with pytest.raises(ConfigError) as err:
        config_mod.load(path)
    assert err.value.key == key
    assert str(err.value).startswith(f"{path}:{key}: ")
    assert words in str(err.value)


def test_rest_address_without_rest_backend_is_accepted(tmp_path):
    """Keys for a backend not in use are harmless (an admin host may switch
    backends with one line)."""
    c = factory.client_from_config(conf(tmp_path, 'slurm_rest_url = "https://h:6820"'))
    assert type(c) is CliClient


# -- who uses it -------------------------------------------------------------


@pytest.fixture
def recorded_factory(monkeypatch):
    """client_from_config replaced by a recorder handing out a sentinel."""
    calls = []
    sentinel = object()

    def fake(cfg, **kw):
        calls.append((cfg, kw))
        return sentinel

    monkeypatch.setattr(factory, "client_from_config", fake)
    return calls, sentinel


def test_engine_from_config_uses_the_factory(tmp_path, recorded_factory):
    from slurm_hooks.act.engine import Engine

    calls, sentinel = recorded_factory
    cfg = conf(tmp_path, "")
    engine = Engine.from_config(cfg, spawn=None)
    assert engine.slurm is sentinel
    assert calls == [(cfg, {})]


def _common_deadline():
    from slurm_hooks.cli._common import INTERACTIVE_DEADLINE_S

    return INTERACTIVE_DEADLINE_S


def test_cli_slurm_client_uses_the_factory(tmp_path, recorded_factory):
    from slurm_hooks.cli._common import slurm_client

    calls, sentinel = recorded_factory
    cfg = conf(tmp_path, "")
    assert slurm_client(cfg) is sentinel
    # An operator command's client: one total deadline (test_cli_fail_fast.py).
    assert calls == [(cfg, {"deadline_s": _common_deadline()})]


def test_worker_uses_the_factory_and_keeps_slurm_conf(tmp_path, recorded_factory, monkeypatch):
    from slurm_hooks.agent import worker

    calls, sentinel = recorded_factory
    path = tmp_path / "config.toml"
    path.write_text(f'[general]\nstate_dir = "{tmp_path}"\n')
    (tmp_path / "incidents").mkdir()
    # build_engine puts worker_env into os.environ (the detached worker's
    # own process); set then delete, so monkeypatch restores "unset" after
    # (delenv of an unset variable records nothing, and a leaked
    # SLURM_HOOKS_CONFIG reached later lab jobs' environment through
    # sbatch --export=ALL: the prolog preflight test read this file).
    for key in ("SLURM_CONF", "SLURM_HOOKS_CONFIG"):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    env = {"SLURM_HOOKS_CONFIG": str(path), "SLURM_CONF": "/lab/slurm.conf"}
    engine = worker.build_engine(tmp_path / "incidents" / "i.json", {"worker_env": env})
    assert engine.slurm is sentinel
    [(cfg, kw)] = calls
    assert cfg.path == str(path)
    assert kw == {"slurm_conf": "/lab/slurm.conf"}


def test_worker_passes_no_slurm_conf_to_the_rest_backend(tmp_path, recorded_factory, monkeypatch):
    from slurm_hooks.agent import worker

    calls, _ = recorded_factory
    path = tmp_path / "config.toml"
    path.write_text(
        f'[general]\nstate_dir = "{tmp_path}"\nslurm_backend = "rest"\n'
        'slurm_rest_url = "http://127.0.0.1:6820"\n'
    )
    (tmp_path / "incidents").mkdir()
    # build_engine puts worker_env into os.environ (the detached worker's
    # own process); set then delete, so monkeypatch restores "unset" after
    # (delenv of an unset variable records nothing, and a leaked
    # SLURM_HOOKS_CONFIG reached later lab jobs' environment through
    # sbatch --export=ALL: the prolog preflight test read this file).
    for key in ("SLURM_CONF", "SLURM_HOOKS_CONFIG"):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    env = {"SLURM_HOOKS_CONFIG": str(path), "SLURM_CONF": "/lab/slurm.conf"}
    worker.build_engine(tmp_path / "incidents" / "i.json", {"worker_env": env})
    assert calls[0][1] == {}


# -- the bridge's keys win for the bridge ------------------------------------


def test_bridge_rest_url_overrides_general(tmp_path, monkeypatch):
    from slurm_hooks.bridge.settings import BridgeConfig

    monkeypatch.setenv("BRIDGE_JWT", "bridge-tok")
    monkeypatch.setenv("SLURM_JWT", "general-tok")
    cfg = conf(
        tmp_path,
        'slurm_backend = "rest"\nslurm_rest_socket = "/run/slurmrestd.sock"\n'
        'slurm_rest_user = "admin"',
        '[bridge]\nslurm_rest_url = "http://slurmrestd:6820"\nslurm_rest_user = "bridge"\n'
        'slurm_rest_token_env = "BRIDGE_JWT"\n',
    )
    bridge = cfg.section("bridge", BridgeConfig)
    bridge.validate(slurm_backend="rest")
    merged = bridge.slurm_general(cfg.general)
    assert (merged.slurm_rest_url, merged.slurm_rest_socket) == ("http://slurmrestd:6820", "")
    assert (merged.slurm_rest_user, merged.slurm_rest_token_env) == ("bridge", "BRIDGE_JWT")
    c = factory.client_from_config(cfg, general=merged)
    assert c.base == "http://slurmrestd:6820"
    assert c.session.headers["X-SLURM-USER-TOKEN"] == "bridge-tok"
    assert c.session.headers["X-SLURM-USER-NAME"] == "bridge"


def test_bridge_falls_back_to_general(tmp_path):
    from slurm_hooks.bridge.settings import BridgeConfig

    cfg = conf(tmp_path, 'slurm_backend = "rest"\nslurm_rest_url = "http://h:6820"')
    bridge = cfg.section("bridge", BridgeConfig)
    with pytest.raises(ValueError, match="slurm_rest_url is required"):
        bridge.validate(slurm_backend="rest")
    bridge.validate(slurm_backend="rest", general_rest=True)
    assert bridge.slurm_general(cfg.general) == cfg.general


# -- end to end: `slurm-hooks status` from an admin host through slurmrestd ---


class Slurmrestd(BaseHTTPRequestHandler):
    """Answers the requests ``status`` makes, as 22.05's slurmrestd did: which
    versions it serves (its /openapi/v3 lists v0.0.38 paths), then the nodes."""

    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).seen.append((self.path, dict(self.headers)))
        if self.path == "/openapi/v3":
            body = json.dumps({"paths": {"/slurm/v0.0.38/nodes/": {"get": {}}}}).encode()
        elif self.path.split("?")[0] == "/slurm/v0.0.38/nodes":
            body = (DATA / "22.05-rest-nodes.json").read_bytes()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slurmrestd():
    pytest.importorskip("requests")
    Slurmrestd.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Slurmrestd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", Slurmrestd.seen
    server.shutdown()
    server.server_close()


def test_status_through_slurmrestd_over_http(tmp_path, monkeypatch, slurmrestd):
    from slurm_hooks.cli import status as status_mod

    url, seen = slurmrestd
    monkeypatch.setenv("SLURM_JWT", "jwt-abc")
    path = tmp_path / "config.toml"
    path.write_text(
        f'[general]\nstate_dir = "{tmp_path}"\nslurm_backend = "rest"\n'
        f'slurm_rest_url = "{url}"\nslurm_rest_user = "root"\nslurm_timeout = 5\n'
    )
    r = CliRunner().invoke(status_mod.command, ["--json", "--config", str(path)])
    assert r.exit_code == 1, r.output  # n1 (ours) and n2 (admin's) are drained
    doc = json.loads(r.output)
    drained = {n for g in doc["groups"] for n in hostlist.expand(g["nodes"])}
    assert {"n1", "n2"} <= drained and "n3" not in drained
    [(asked, _), (req, headers)] = seen
    assert asked == "/openapi/v3"
    assert req.startswith("/slurm/v0.0.38/nodes")
    assert headers["X-SLURM-USER-TOKEN"] == "jwt-abc"
    assert headers["X-SLURM-USER-NAME"] == "root"
