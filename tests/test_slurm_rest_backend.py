"""slurmrestd backend: against the lab's slurmrestd (OpenAPI v0.0.38 on a
unix socket), plus transport errors without one."""

from __future__ import annotations

import pytest
from slurm_hooks_lab.lab import rest_api
from slurm_hooks_lab.lab import rest_auth as lab_rest_auth

from slurm_hooks.core.errors import JobGone, NodeNotFound, SlurmError, SlurmUnavailable
from slurm_hooks.slurm import get_client
from slurm_hooks.slurm.base import SignalTarget, SlurmClient
from slurm_hooks.slurm.parse import parse_version
from slurm_hooks.slurm.rest_backend import RestClient

pytest.importorskip("requests_unixsocket", reason="requests-unixsocket not installed (rest extra)")


def test_unreachable_socket_is_unavailable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = RestClient(socket=str(tmp_path / "missing.sock"), retries=1, backoff=0.01, timeout=2)
    with pytest.raises(SlurmUnavailable, match="slurmrestd unreachable"):
        c.list_nodes()
    assert c.ping() is False


def test_http_token_headers_and_factory() -> None:
    c = get_client("rest", url="http://slurm.example:6820/", user="alice", token="tok")
    assert isinstance(c, SlurmClient)
    assert c.session.headers["X-SLURM-USER-NAME"] == "alice"
    assert c.session.headers["X-SLURM-USER-TOKEN"] == "tok"
    assert c._api is None  # nothing asked yet: the version is negotiated on first use
    fixed = get_client("rest", url="http://slurm.example:6820/", api="v0.0.38")
    assert fixed._url("nodes") == "http://slurm.example:6820/slurm/v0.0.38/nodes"
    with pytest.raises(SlurmError, match="exactly one"):
        RestClient()


@pytest.mark.parametrize(
    "op",
    [
        lambda c: c.drain("n1", "x"),
        lambda c: c.resume("n1"),
        lambda c: c.down("n1", "x"),
        lambda c: c.update_reason("n1", "x"),
        lambda c: c.requeue("1"),
        lambda c: c.show_config(),
        lambda c: c.signal_job("1", "USR1", SignalTarget.BATCH),
        lambda c: c.set_job_comment("1", "x", admin=True),
    ],
)
def test_v0038_gaps_name_the_cli_backend(tmp_path, op) -> None:  # type: ignore[no-untyped-def]
    c = RestClient(socket=str(tmp_path / "never-used.sock"), api="v0.0.38")
    with pytest.raises(SlurmError, match="use the cli backend"):
        op(c)


@pytest.mark.parametrize(
    ("op", "says"),
    [
        (lambda c: c.requeue("1"), "none of OpenAPI v0.0.38..v0.0.44"),
        (lambda c: c.show_config(), "none of OpenAPI v0.0.38..v0.0.44"),
        (lambda c: c.drain("n1", "x"), "OpenAPI v0.0.39, v0.0.40"),
    ],
)
def test_gaps_say_which_versions_have_the_operation(tmp_path, op, says) -> None:  # type: ignore[no-untyped-def]
    # requeue and show config are missing everywhere: said without asking the server
    c = RestClient(
        socket=str(tmp_path / "never-used.sock"), api=None if "none" in says else "v0.0.38"
    )
    with pytest.raises(SlurmError, match="use the cli backend") as exc:
        op(c)
    assert says in str(exc.value) and type(exc.value) is SlurmError


@pytest.fixture
def rest(fresh_lab) -> RestClient:  # type: ignore[no-untyped-def]
    # JWT from 24.11 on (slurmrestd as an unprivileged user, a root token from
    # scontrol token), local auth by the socket's peer uid on 22.05
    c = fresh_lab.rest_client(timeout=10, retries=2, backoff=0.1)
    version = parse_version(fresh_lab.status().slurm_version or "")
    assert ("X-SLURM-USER-TOKEN" in c.session.headers) == (lab_rest_auth(version) == "jwt")
    # negotiated with the lab's slurmrestd: the newest version both know
    # (measured: 22.05 serves v0.0.38; 24.11 v0.0.40-42; 26.05 v0.0.42-45)
    assert c.api == NEGOTIATED.get(tuple(version[:2]), rest_api(version))
    return c


#: What the client settles on with each Debian release's slurmrestd: 26.05's
#: newest, v0.0.45, is past the client's KNOWN_APIS (up to v0.0.44).
NEGOTIATED = {(22, 5): "v0.0.38", (24, 11): "v0.0.42", (26, 5): "v0.0.44"}


@pytest.mark.slurm
def test_rest_nodes_match_cli(fresh_lab, rest) -> None:  # type: ignore[no-untyped-def]
    cli = fresh_lab.client()
    reason = "admin: rest check = fine [x]"
    cli.drain("n2", reason)
    by_rest = {n.name: n for n in rest.list_nodes()}
    by_cli = {n.name: n for n in cli.list_nodes()}
    assert sorted(by_rest) == sorted(by_cli) == fresh_lab.node_names
    for name, node in by_cli.items():
        r = by_rest[name]
        assert (r.state, r.flags, r.reason, r.reason_user, r.reason_time) == (
            node.state,
            node.flags,
            node.reason,
            node.reason_user,
            node.reason_time,
        )
    assert rest.get_node("n2").reason == reason
    assert [n.name for n in rest.list_nodes("n[3-4]")] == ["n3", "n4"]
    # 22.05: HTTP 500; 23.11+: HTTP 200 with errors[] ("Failure to query node"):
    # both the same typed error
    with pytest.raises(NodeNotFound):
        rest.get_node("nope")
    assert rest.ping()


@pytest.mark.slurm
def test_rest_jobs_signal_comment_cancel(fresh_lab, rest, job_dir, sbatch) -> None:  # type: ignore[no-untyped-def]
    script = job_dir / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        "trap 'echo USR1 >> \"$OUT/usr1.$SLURM_JOB_ID\"' USR1\n"
        'touch "$OUT/ready.$SLURM_JOB_ID"\n'
        "while true; do sleep 0.2 & wait $!; done\n"
    )
    script.chmod(0o755)
    jid = sbatch(script, "--requeue", f"--export=ALL,OUT={job_dir}", "-o", "/dev/null")
    job = fresh_lab.wait_job(jid, lambda j: j.state == "RUNNING", timeout=20)
    got = rest.get_job(jid)
    assert (got.user, got.state, got.nodes, got.batch_host, got.requeue) == (
        "sltest",
        "RUNNING",
        job.nodes,
        job.batch_host,
        True,
    )
    assert [j.job_id for j in rest.jobs_on_node(job.batch_host)] == [jid]
    assert jid in [j.job_id for j in rest.list_jobs()]
    rest.set_job_comment(jid, "via rest")
    assert fresh_lab.client().get_job(jid).comment == "via rest"
    # signal only once the trap is installed (RUNNING comes before that)
    fresh_lab.wait_for((job_dir / f"ready.{jid}").exists, 10, what="trap installed")
    rest.signal_job(jid, "USR1", SignalTarget.FULL)
    fresh_lab.wait_for((job_dir / f"usr1.{jid}").exists, 10, what="USR1 via rest")
    rest.cancel(jid)
    fresh_lab.wait_for(lambda: not rest.jobs_on_node(job.batch_host), 30, what="cancel via rest")
    # 22.05: HTTP 500 "Invalid job id"; 24.11: HTTP 404 "Unable to query JobId=":
    # both the same typed error
    with pytest.raises(JobGone):
        rest.get_job("999999")


@pytest.mark.slurm
def test_rest_jwt_lab_refuses_a_client_without_a_valid_token(fresh_lab, rest) -> None:  # type: ignore[no-untyped-def]
    """Where the lab's slurmrestd uses JWT (24.11+), the token is what lets
    the client in: none, or one signed with another key, is refused, while
    the lab's own token reads the nodes."""
    if "X-SLURM-USER-TOKEN" not in rest.session.headers:
        pytest.skip("this Slurm's lab slurmrestd uses local auth (the socket peer's uid)")
    assert [n.name for n in rest.list_nodes()] == fresh_lab.node_names
    sock = fresh_lab.start_rest()
    for token in (None, rest.session.headers["X-SLURM-USER-TOKEN"][:-4] + "AAAA"):
        c = RestClient(socket=sock, user="root", token=token, api=rest.api, retries=0, timeout=10)
        with pytest.raises(SlurmError) as exc:
            c.list_nodes()
        assert type(exc.value) is SlurmError  # refused, not unreachable
