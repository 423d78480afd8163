"""Notification sinks against real transports: a loopback HTTP server, a real
mail-like command.  A failing sink never raises."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from slurm_hooks.act.notify import Alert, Notifier, NotifyConfig, build_notifier
from slurm_hooks.act.notify.jobcomment import JobCommentSink
from slurm_hooks.act.notify.mail import MailSink
from slurm_hooks.act.notify.webhook import WebhookSink

ALERT = Alert(
    "job_requeued",
    "job 42 (train) was requeued: node n1 failed (XID79 gpu3, incident 7f3a2c1b)",
    node="n1",
    job_id="42",
    user="alice",
    incident="7f3a2c1b",
    code="XID79",
    fields={"component": "gpu3"},
)


class Hook:
    """A loopback webhook receiver: answers the scripted statuses in order."""

    def __init__(self, statuses=(200,)):
        self.statuses = list(statuses)
        self.bodies: list[dict] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers["Content-Length"])
                outer.bodies.append(json.loads(self.rfile.read(n)))
                status = outer.statuses.pop(0) if len(outer.statuses) > 1 else outer.statuses[0]
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T000/B000/XXX"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


def test_webhook_posts_slack_compatible_json(hook):
    WebhookSink(hook.url, timeout=2).send(ALERT)
    (body,) = hook.bodies
    assert "job 42" in body["text"] and body["text"].startswith("*slurm-hooks: job requeued")
    fields = {f["title"]: f["value"] for f in body["attachments"][0]["fields"]}
    assert fields["user"] == "alice" and fields["node"] == "n1" and fields["component"] == "gpu3"
    assert body["slurm_hooks"]["kind"] == "job_requeued"
    assert body["slurm_hooks"]["incident"] == "7f3a2c1b"


def test_webhook_retries_5xx_then_succeeds():
    h = Hook(statuses=(503, 502, 200))
    try:
        out = Notifier([WebhookSink(h.url, timeout=2, retries=3, backoff=0.01)]).send(ALERT)
        assert out[0].ok and len(h.bodies) == 3
    finally:
        h.close()


def test_failing_webhook_is_reported_not_raised():
    h = Hook(statuses=(500,))
    try:
        out = Notifier([WebhookSink(h.url, timeout=2, retries=1, backoff=0.01)]).send(ALERT)
    finally:
        h.close()
    assert not out[0].ok and "500" in out[0].error
    assert len(h.bodies) == 2  # one try + one retry


def test_unreachable_webhook_does_not_block_other_sinks(tmp_path, hook):
    port = hook.server.server_port
    hook.close()  # nothing listens there any more
    dead = WebhookSink(f"http://127.0.0.1:{port}/x", timeout=1, retries=0)
    # alice is no passwd user here: the sink resolves owners through getpwnam.
    mail = MailSink(["tee", str(tmp_path / "{user}-{job}.mail")], timeout=5, getpwnam=str)
    out = Notifier([dead, mail]).send(ALERT)
    assert [d.ok for d in out] == [False, True]
    assert "incident 7f3a2c1b" in (tmp_path / "alice-42.mail").read_text()


def test_mail_argv_placeholders_and_failure(tmp_path):
    mail = MailSink(["false"], timeout=5, getpwnam=str)
    (d,) = Notifier([mail]).send(ALERT)
    assert not d.ok and "rc=1" in d.error
    # A mail to {user} is not attempted for an alert with no user.
    to_user = MailSink(["tee", str(tmp_path / "{user}.mail")])
    assert Notifier([to_user]).send(Alert("breaker_tripped", "x")) == []


class Comments:
    def __init__(self, comment=None):
        self.calls = []
        self.comment = comment

    def set_job_comment(self, job_id, comment, *, admin=False):
        self.calls.append((job_id, comment, admin))
        self.comment = comment

    def get_job(self, job_id):
        return SimpleNamespace(comment=self.comment)


def test_the_note_keeps_the_owners_words_to_us_in_the_jobs_comment():
    """The note replaces the job's Comment: the owner's opt-out and opt-in
    stay first, so the requeued job is still watched (or not) as they asked;
    the rest of their comment gives way."""
    slurm = Comments("run 7,slurm-hooks:no-watch  slurm-hooks:requeue-on-hang slurm-hooks:BAD")
    Notifier([JobCommentSink(slurm)]).send(replace(ALERT, text="job 42 requeued " + "x" * 300))
    ((job, text, admin),) = slurm.calls
    assert not admin and len(text) == 200
    assert text.startswith("slurm-hooks:no-watch slurm-hooks:requeue-on-hang slurm-hooks: job 42")
    Notifier([JobCommentSink(slurm)]).send(ALERT)  # a second note keeps them too
    assert slurm.comment.startswith("slurm-hooks:no-watch slurm-hooks:requeue-on-hang slurm-")


def test_job_comment_only_for_job_alerts():
    slurm = Comments()
    n = Notifier([JobCommentSink(slurm, admin=True)])
    n.send(ALERT)
    n.send(Alert("node_drained", "n1 drained", node="n1"))
    ((job, text, admin),) = slurm.calls
    assert job == "42" and admin and text.startswith("slurm-hooks: job 42") and "\n" not in text


def test_build_notifier_from_config(hook):
    cfg = NotifyConfig(webhook_url=hook.url, mail_argv=("true",), job_comment=True)
    names = [s.name for s in build_notifier(cfg, Comments()).sinks]
    assert names == ["webhook", "mail", "job_comment"]
    assert build_notifier(NotifyConfig(), None).sinks == []
    with pytest.raises(ValueError):
        NotifyConfig(webhook_url="ftp://x").validate()
