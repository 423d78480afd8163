"""Hostile user, job, node and text values never reach a mail command line as
an option, never address somebody else, and never run a command.

The mail command is a recording fake: it writes its argv and stdin to a file
and FAILS (rc 3) on any argument that looks like an option other than the
template's own ``-s`` and ``--``; a test that sees rc 3 fails."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from slurm_hooks.act.notify.base import Alert, Notifier
from slurm_hooks.act.notify.mail import MailSink, mail_body
from slurm_hooks.act.notify.webhook import payload
from slurm_hooks.core.identifiers import InvalidIdentifier, check_job_id, check_user

RECORDER = """#!{python}
import json, os, sys
argv = sys.argv[1:]
bad = [a for a in argv if a.startswith("-") and a not in ("-s", "--")]
bad += [a for a in argv if "\\n" in a or "\\r" in a]
with open(os.environ["MAIL_RECORD"], "a") as f:
    f.write(json.dumps({{"argv": argv, "stdin": sys.stdin.read(), "bad": bad}}) + "\\n")
sys.exit(3 if bad else 0)
"""

HOSTILE_USERS = [
    "--exec=!touch /tmp/pwned",
    "-t",
    "-froot",
    "alice -t",
    "alice\nCc: victim@example.org",
    "alice;id",
    "alice@evil.example.org",
    "$(id)",
    "root(0)",
    "r\u00f2ot",  # unicode letters
    "\u0661\u0662",  # Arabic-Indic digits
    "a" * 33,
    "",  # empty: no mail to "{user}", checked by wants()
    "ALICE",
]
HOSTILE_JOBS = ["1 -t", "--exec=x", "-1", "1;id", "12\n13", "\u0661\u0662", "1_2_3", "1" * 40]
HOSTILE_NODES = ["-n1", "n1 --exec=x", "n1\nTo: x", "n1;id"]


@pytest.fixture
def recorder(tmp_path, monkeypatch):
    script = tmp_path / "fake-mail"
    script.write_text(RECORDER.format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("MAIL_RECORD", str(record))

    def calls() -> list[dict]:
        if not record.exists():
            return []
        return [json.loads(line) for line in record.read_text().splitlines()]

    return script, calls


def _sink(script: Path, users: set[str] = frozenset({"alice", "root"})) -> MailSink:
    def getpwnam(name: str) -> object:
        if name not in users:
            raise KeyError(name)
        return name

    argv = [str(script), "-s", "{subject}", "--", "{user}@example.org", "job={job}", "{node}"]
    return MailSink(argv, timeout=10, getpwnam=getpwnam)


def _alert(**kw) -> Alert:
    base = dict(
        kind="job_requeued",
        text="job 42 requeued after XID79 on n1",
        node="n1",
        job_id="42",
        user="alice",
        incident="7f3a2c1b",
        code="XID79",
    )
    base.update(kw)
    return Alert(**base)


def test_valid_alert_reaches_the_recorder_with_plain_values(recorder):
    script, calls = recorder
    (d,) = Notifier([_sink(script)]).send(_alert())
    assert d.ok, d.error
    (call,) = calls()
    assert call["bad"] == []
    assert call["argv"] == [
        "-s",
        "slurm-hooks: job requeued n1 job 42",
        "--",
        "alice@example.org",
        "job=42",
        "n1",
    ]


@pytest.mark.parametrize("user", HOSTILE_USERS)
def test_hostile_user_runs_no_command_and_mails_nobody(recorder, user):
    script, calls = recorder
    out = Notifier([_sink(script)]).send(_alert(user=user))
    assert calls() == []  # the mail command never ran
    assert all(not d.ok for d in out)


@pytest.mark.parametrize("job", HOSTILE_JOBS)
def test_hostile_job_id_runs_no_command(recorder, job):
    script, calls = recorder
    out = Notifier([_sink(script)]).send(_alert(job_id=job))
    assert calls() == [] and [d.ok for d in out] == [False]


@pytest.mark.parametrize("node", HOSTILE_NODES)
def test_hostile_node_runs_no_command(recorder, node):
    script, calls = recorder
    out = Notifier([_sink(script)]).send(_alert(node=node))
    assert calls() == [] and [d.ok for d in out] == [False]


@pytest.mark.parametrize(
    "field,value",
    [("incident", "-x"), ("incident", "7f 3a"), ("code", "--exec=x"), ("kind", "a\nb")],
)
def test_hostile_tokens_run_no_command(recorder, field, value):
    script, calls = recorder
    out = Notifier([_sink(script)]).send(_alert(**{field: value}))
    assert calls() == [] and [d.ok for d in out] == [False]


def test_valid_name_that_is_not_a_passwd_user_gets_no_mail(recorder):
    script, calls = recorder
    out = Notifier([_sink(script)]).send(_alert(user="mallory"))
    assert calls() == [] and "not in passwd" in (out[0].error or "")


def test_real_passwd_lookup_is_the_default(recorder):
    script, calls = recorder
    argv = [str(script), "-s", "{subject}", "--", "{user}"]
    sink = MailSink(argv, timeout=10)  # real pwd.getpwnam
    assert Notifier([sink]).send(_alert(user="root"))[0].ok
    assert Notifier([sink]).send(_alert(user="no-such-user-xyz"))[0].ok is False
    assert [c["argv"][-1] for c in calls()] == ["root"]


def test_hostile_text_goes_to_stdin_without_tilde_escapes(recorder):
    script, calls = recorder
    text = "bad GPU\n~!touch /tmp/pwned\n~c victim@example.org\r\nend\x00\x1b[31m"
    assert Notifier([_sink(script)]).send(_alert(text=text))[0].ok
    (call,) = calls()
    body = call["stdin"]
    assert not any(line.startswith("~") for line in body.splitlines())
    assert "\x00" not in body and "\x1b" not in body and "\r" not in body
    assert call["bad"] == []


def test_mail_body_is_bounded():
    assert len(mail_body("x" * 100_000)) <= 8193


def test_no_command_is_run_for_a_hostile_user_even_with_a_shell_metachar_template(
    tmp_path, recorder
):
    # Even a template without "--" gets no option-like value: the value is refused.
    script, calls = recorder
    sink = MailSink([str(script), "{user}"], timeout=10, getpwnam=lambda n: n)
    for user in ("--exec=!id", "-t", "x y"):
        assert Notifier([sink]).send(_alert(user=user))[0].ok is False
    assert calls() == []
    assert not os.path.exists("/tmp/pwned")


def test_check_user_and_job_id_forms():
    for ok in ("alice", "_svc", "a-b_c", "machine$", "a" * 32):
        assert check_user(ok, resolve=False) == ok
    for bad in HOSTILE_USERS:
        with pytest.raises(InvalidIdentifier):
            check_user(bad, resolve=False)
    for ok in ("1", "123_4", "123+1"):
        assert check_job_id(ok) == ok
    for bad in HOSTILE_JOBS + ["", None, 12]:
        with pytest.raises(InvalidIdentifier):
            check_job_id(bad)


def test_webhook_payload_names_no_forged_user_and_mentions_nobody():
    p = payload(_alert(user="<!channel> --exec=x", text="ping <!here> & <@U123|bob>"))
    assert p["slurm_hooks"]["user"] == "(invalid)"
    shown = json.dumps({"text": p["text"], "attachments": p["attachments"]})
    assert "<!" not in shown and "<@" not in shown  # what Slack renders
    assert "&lt;!here&gt;" in p["text"]
    ok = payload(_alert())
    assert ok["slurm_hooks"]["user"] == "alice"


def test_webhook_text_pages_no_channel_and_links_nothing():
    """Mattermost and Rocket.Chat read a plain ``@channel`` or ``@user`` as
    a mention, and chats link bare URLs: a job's name carries both."""
    p = payload(_alert(text="job 7 (@channel @all ops: log in at https://sso.example/x) requeued"))
    shown = json.dumps({"text": p["text"], "attachments": p["attachments"]}, ensure_ascii=False)
    for word in ("@channel", "@all", "https://"):
        assert word not in shown
    assert p["text"].replace("\u200b", "").endswith("https://sso.example/x) requeued")
    assert p["unfurl_links"] is False and p["unfurl_media"] is False
