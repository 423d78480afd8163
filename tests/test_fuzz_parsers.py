"""Every parser of outside text, fed random and hostile text: it returns or
raises its documented typed error, nothing else (no ValueError from int(),
no RecursionError, no IndexError).  Text is drawn around real captures and
the tokens the grammars care about, so the fuzzer reaches past the first
check.  Bounded: 200 examples per parser, no deadline (CI on 2 cores)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_hooks.core import config
from slurm_hooks.core.errors import ConfigError, ReasonFormatError, SlurmError
from slurm_hooks.core.model import ReasonOwner
from slurm_hooks.core.reason import classify_owner, parse_reason
from slurm_hooks.detect.engines.burnin.gpu_burn import parse_gpu_burn
from slurm_hooks.detect.engines.dcgm import DcgmParseError, parse_dcgmi_diag
from slurm_hooks.detect.engines.nccl.parser import parse_nccl_tests
from slurm_hooks.detect.xid.parser import classify_line
from slurm_hooks.detect.xid.scan import scan_text
from slurm_hooks.slurm import parse, squeue

DATA = Path(__file__).parent / "data"
FUZZ = settings(max_examples=200, deadline=None)

SLURM = sorted((DATA / "slurm").glob("22.05-*.txt"))
SLURM_TEXT = [p.read_text() for p in SLURM]
JOB_LINE = (DATA / "slurm" / "22.05-job_running_comments.txt").read_text().strip()
KERNEL = [
    c["line"] for c in json.loads((DATA / "kernel-logs" / "real-lines.json").read_text())["events"]
]

_words = st.sampled_from(
    [
        "slurm-hooks/1",
        "slurm-hooks/",
        "XID79",
        "inc=7f3a2c1b",
        "inc=",
        "::",
        " :: ",
        "gpu3",
        "repl=requested",
        "=",
        "\u0661",
        "\u00a0",
        "\n",
        "1" * 5000,
        "NVRM: Xid (PCI:0000:18:00): 79, ",
        "SXid (PCI:0000:84:00.0): 12028, ",
        "pid=",
        "name=",
        "kernel: ",
        "[ 12.5] ",
        "4,1,2,-;",
        "12,1,2,-;",
        "Nov 29 11:35:27 host kernel: ",
        "Nov 29 11:35:27 host user: ",
        "UserId=root(0)",
        "JobState=COMPLETED",
        "Restarts=99999999999999999999999",
        "Requeue=0",
        "NodeList=n9",
        " Command=",
        " JobName=",
        "JobId=1",
        "NodeName=n1",
        "State=IDLE+DRAIN",
        " Reason=",
        " [root@2026-01-01T00:00:00]",
        '{"MESSAGE":',
        '"_TRANSPORT":"kernel"',
        "[" * 50,
        "{",
        "}",
        "\x1f",
        "\x00",
    ]
)
_texty = st.lists(st.one_of(_words, st.text(max_size=40)), max_size=30).map("".join)


def _mutations(base: list[str]):
    """A real capture with random text spliced in at a random place."""
    return st.tuples(st.sampled_from(base), _texty, st.integers(min_value=0)).map(
        lambda t: t[0][: t[2] % (len(t[0]) + 1)] + t[1] + t[0][t[2] % (len(t[0]) + 1) :]
    )


# -- reasons --------------------------------------------------------------------


@FUZZ
@given(st.one_of(_texty, st.text()))
def test_reason_parse_raises_only_reason_format_error(raw):
    try:
        parse_reason(raw)
    except ReasonFormatError:
        pass
    assert isinstance(classify_owner(raw), ReasonOwner)


def test_reason_known_crashers():
    for raw in (
        "slurm-hooks/" + "1" * 4301 + " XID79 inc=1 :: x",
        "slurm-hooks/\u0661 XID79 inc=7f3a2c1b :: x",
        "slurm-hooks/1\u00a0XID79 inc=7f3a2c1b :: x",
        "slurm-hooks/1 XID79 inc=7f3a2c1b\n :: x",
    ):
        assert classify_owner(raw) is not ReasonOwner.OURS


# -- Slurm outputs ----------------------------------------------------------------


@FUZZ
@given(st.one_of(_texty, _mutations(SLURM_TEXT)))
def test_scontrol_parsers_never_crash(text):
    for fn in (parse.parse_scontrol_nodes, parse.parse_scontrol_jobs):
        try:
            fn(text)
        except SlurmError:
            pass
    parse.parse_state(text)
    parse.parse_show_config(text)
    squeue.parse_squeue(text)
    try:
        parse.parse_version(text)
    except SlurmError:
        pass


@FUZZ
@given(_mutations([JOB_LINE]))
def test_job_record_parse_is_the_truth_or_refused(text):
    try:
        fields = parse.job_record_fields(text)
    except SlurmError:
        return
    assert "JobId" in fields


@FUZZ
@given(st.one_of(_texty, _mutations([p.read_text() for p in (DATA / "slurm").glob("*.json")])))
def test_json_node_parsers_raise_only_slurm_error(text):
    try:
        parse.parse_nodes_json(text)
    except SlurmError:
        pass


def test_deeply_nested_json_is_a_slurm_error():
    try:
        parse.parse_nodes_json("[" * 100_000)
    except SlurmError:
        return
    raise AssertionError("no error")


# -- kernel lines -----------------------------------------------------------------


@FUZZ
@given(st.one_of(_texty, _mutations(KERNEL)))
def test_kernel_line_parser_never_raises(line):
    classify_line(line)
    scan_text(line + "\n")
    classify_line(json.dumps({"MESSAGE": line, "_TRANSPORT": "kernel"}))


def test_a_deep_journal_record_is_skipped_and_the_scan_goes_on():
    good = json.dumps({"MESSAGE": KERNEL[0], "_TRANSPORT": "kernel"})
    deep = '{"MESSAGE": "NVRM: Xid (PCI:0000:01:00): 79, x", "a": ' + "[" * 30_000 + "}"
    res = scan_text(good + "\n" + deep + "\n" + good + "\n")
    assert res.stats.events == 2 and res.stats.malformed == 1


# -- engine outputs ---------------------------------------------------------------


def _captures(sub: str) -> list[str]:
    return [p.read_text(errors="replace") for p in (DATA / sub).glob("*") if p.is_file()] or [""]


@FUZZ
@given(st.one_of(_texty, _mutations(_captures("nccl"))))
def test_nccl_parser_never_raises(text):
    parse_nccl_tests(text)


@FUZZ
@given(st.one_of(_texty, _mutations(_captures("gpu_burn"))))
def test_gpu_burn_parser_never_raises(text):
    parse_gpu_burn(text)


@FUZZ
@given(st.one_of(_texty, _mutations(_captures("dcgmi"))))
def test_dcgmi_parser_raises_only_its_error(text):
    try:
        parse_dcgmi_diag(text)
    except DcgmParseError:
        pass


# -- config -----------------------------------------------------------------------

_toml_values = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "0", "0.0", "1e300", "3", '"x"', "true", "[1, 2]", "{a = 1}"]
)
_keys = st.sampled_from(
    [
        ("general", "slurm_timeout"),
        ("policy", "grace_seconds"),
        ("policy", "breaker_max_share"),
        ("notify", "mail_timeout"),
        ("notify", "webhook_retries"),
        ("watch", "retry_s"),
        ("bridge", "interval"),
        ("prolog", "budget_s"),
        ("policy", "nosuchkey"),
    ]
)


@FUZZ
@given(st.lists(st.tuples(_keys, _toml_values), max_size=6), _texty)
def test_config_raises_only_config_error(pairs, junk):
    by_section: dict[str, list[str]] = {}
    for (section, key), value in pairs:
        by_section.setdefault(section, []).append(f"{key} = {value}")
    text = "\n".join(
        f"[{s}]\n" + "\n".join(dict.fromkeys(lines)) for s, lines in by_section.items()
    )
    for doc in (text, junk, text + "\n" + junk):
        try:
            config.parse(doc)
        except ConfigError:
            pass


def test_config_an_integer_too_long_for_python_is_a_config_error():
    """tomllib turns a 5000-digit integer into int(), which raises a plain
    ValueError past Python's digit limit (found by the fuzz test above)."""
    for doc in ("Command=" + "1" * 5000, "[watch]\nretry_s = " + "9" * 4301):
        with pytest.raises(ConfigError, match="invalid TOML"):
            config.parse(doc)


def test_config_reports_every_error_at_once_and_bounds_numbers():
    text = (
        "[general]\nslurm_timeout = nan\n"
        "[policy]\ngrace_seconds = -1\nbreaker_max_share = 0\n"
        "[notify]\nmail_timeout = 0\nbogus = 1\n"
        "[watch]\nretry_s = inf\n"
    )
    try:
        config.parse(text, path="x.toml")
    except config.ConfigErrors as exc:
        keys = sorted(e.key for e in exc.errors)
    else:
        raise AssertionError("no error")
    assert keys == [
        "general.slurm_timeout",
        "notify.bogus",
        "notify.mail_timeout",
        "policy.breaker_max_share",
        "policy.grace_seconds",
        "watch.retry_s",
    ]


def test_deeply_nested_toml_is_a_config_error():
    try:
        config.parse("a = " + "[" * 100_000)
    except ConfigError as exc:
        assert "nested" in str(exc) or "invalid TOML" in str(exc)
    else:
        raise AssertionError("no error")
