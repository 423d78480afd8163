"""Site checks imported from NHC lines judge a node as NHC does.

Each case is an NHC check line and NHC's exit status on the node described
(0 passes, 1 fails).  NHC cannot run here (tests/data/nhc/SOURCES.md), so its
verdicts are recorded: where NHC's own test suite has the case (mej/nhc
test/test_lbnl_*.nhc at 9c4a38c) the values and the status are its own, the
rest follow NHC's documented semantics (README "Built-in Checks").  Every
kind is run on a healthy node and on the same node broken.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from site_node import SWAP_FREE, Node, cpuinfo, meminfo

from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.model import Action, Status
from slurm_hooks.detect.site.spec import SiteChecksConfig

DATA = Path(__file__).parent / "data" / "nhc"


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


# -- hardware: NHC's test/test_lbnl_hw.nhc, values and verdicts as recorded there ---------

HW_CASES = [
    ("check_hw_cpuinfo 2 12 24", 0), ("check_hw_cpuinfo 2 12 12", 1), ("check_hw_cpuinfo 2 8 16", 1),
    ("check_hw_cpuinfo 2 8 8", 1), ("check_hw_cpuinfo 2 2 2", 1), ("check_hw_cpuinfo 1 1 1", 1),
    ("check_hw_cpuinfo 0 0 0", 1),
    ("check_hw_physmem 0 0", 1), ("check_hw_physmem 32857508 32857508", 0), ("check_hw_physmem 1 12", 1),
    ("check_hw_physmem 100 32857508", 0), ("check_hw_physmem 31GB 33GB", 0),
    ("check_hw_physmem 32857508 99G", 0), ("check_hw_physmem 98GB 99GB", 1),
    ("check_hw_physmem 32g 32g 10%", 0), ("check_hw_physmem 32g 32g 0%", 1),
    ("check_hw_physmem 42g 48g 50%", 0), ("check_hw_physmem 24g 24g 50%", 0),
    ("check_hw_physmem 48g 64g 10%", 1), ("check_hw_physmem 12g 24g 20%", 1),
    ("check_hw_swap 0 0", 1), ("check_hw_swap 18563064 18563064", 0), ("check_hw_swap 1 12", 1),
    ("check_hw_swap 100 18563064", 0), ("check_hw_swap 18000000 19G", 0),
    ("check_hw_swap 18563064 99G", 0), ("check_hw_swap 999999999 99G", 1),
    ("check_hw_swap 18g 18g 10%", 0), ("check_hw_swap 18g 18g 0%", 1),
    ("check_hw_swap 22g 28g 50%", 0), ("check_hw_swap 5g 15g 50%", 0),
    ("check_hw_swap 24g 48g 10%", 1), ("check_hw_swap 4g 8g 20%", 1),
    ("check_hw_mem 0 0", 1), ("check_hw_mem 51420572 51420572", 0), ("check_hw_mem 1 12k", 1),
    ("check_hw_mem 100kB 51420572", 0), ("check_hw_mem 48g 52gb", 0),
    ("check_hw_mem 51420572 99gb", 0), ("check_hw_mem 99999999 99G", 1),
    ("check_hw_mem 50g 50g 10%", 0), ("check_hw_mem 50g 50g 0%", 1),
    ("check_hw_mem 60g 72g 50%", 0), ("check_hw_mem 24g 32g 50%", 0),
    ("check_hw_mem 72g 84g 10%", 1), ("check_hw_mem 12g 24g 20%", 1),
    ("check_hw_physmem_free 0", 0), ("check_hw_physmem_free 100k", 0),
    ("check_hw_physmem_free 27828840", 0), ("check_hw_physmem_free 99999999", 1),
    ("check_hw_swap_free 0", 0), ("check_hw_swap_free 1mb", 0),
    ("check_hw_swap_free 18480520", 0), ("check_hw_swap_free 99999M", 1),
    ("check_hw_mem_free 0", 0), ("check_hw_mem_free 1M", 0),
    ("check_hw_mem_free 46309360", 0), ("check_hw_mem_free 99999M", 1),
]  # fmt: skip


@pytest.mark.parametrize(("line", "nhc_rc"), HW_CASES)
def test_hardware_verdicts_match_nhcs_test_suite(node, line, nhc_rc):
    assert node.verdict(line) == nhc_rc


def test_cpuinfo_fails_when_a_socket_disappears(node):
    line = "check_hw_cpuinfo 2 12 24"
    assert node.verdict(line) == 0
    node.write("proc/cpuinfo", cpuinfo(1, 6, 2))  # a CPU mapped out at boot
    assert node.verdict(line) == 1


def test_physmem_fails_when_a_dimm_is_lost(node):
    line = "check_hw_physmem 32gb 32gb 5%"
    assert node.verdict(line) == 0
    node.write("proc/meminfo", meminfo(ram_total=32857508 - 8 * 1024 * 1024))
    assert node.verdict(line) == 1


def test_swap_free_fails_when_swap_runs_out(node):
    assert node.verdict("check_hw_swap_free 1GB") == 0
    node.write("proc/meminfo", meminfo(swap_free=SWAP_FREE // 1000))
    assert node.verdict("check_hw_swap_free 1GB") == 1


# test_lbnl_hw.nhc: ports ib0 ACTIVE/LinkUp 56 and ib1 DOWN/Disabled 10.  NHC
# names a port "<device>:<port>" from sysfs (its gather); the suite's ib0/ib1
# are mlx4_0:1 and mlx4_1:1 here.
IB_CASES = [
    ("check_hw_ib 100", 1), ("check_hw_ib 56", 0), ("check_hw_ib 40", 1), ("check_hw_ib 20", 1),
    ("check_hw_ib 10", 1), ("check_hw_ib 56 mlx4_1:1", 1), ("check_hw_ib 56 mlx4_0:1", 0),
    ("check_hw_ib 10 mlx4_1:1", 1), ("check_hw_ib '' mlx4_0:1", 0), ("check_hw_ib '' mlx4_1:1", 1),
]  # fmt: skip


@pytest.mark.parametrize(("line", "nhc_rc"), IB_CASES)
def test_ib_verdicts_match_nhcs_test_suite(node, line, nhc_rc):
    node.ib_port("mlx4_0", 1, "4: ACTIVE", "5: LinkUp", "56 Gb/sec (4X FDR)")
    node.ib_port("mlx4_1", 1, "1: DOWN", "3: Disabled", "10 Gb/sec (4X)")
    assert node.verdict(line) == nhc_rc


def test_ib_fails_when_the_port_goes_down(node):
    node.ib_port("mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)")
    assert node.verdict("check_hw_ib 100") == 0
    node.ib_port("mlx5_0", 1, "4: ACTIVE", "5: LinkUp", "40 Gb/sec (4X QDR)")  # trained down
    assert node.verdict("check_hw_ib 100") == 1
    node.ib_port("mlx5_0", 1, "1: DOWN", "2: Polling", "100 Gb/sec (4X EDR)")
    assert node.verdict("check_hw_ib 100") == 1


def test_eth_fails_when_the_interface_is_gone(node):
    (node.sys / "class" / "net" / "eth1").mkdir()
    assert node.verdict("check_hw_eth eth1") == 0
    (node.sys / "class" / "net" / "eth1").rmdir()
    assert node.verdict("check_hw_eth eth1") == 1


# The per-DIMM summary `mcelog --client` prints (the format NHC's check parses).
MCELOG = """dimm 0
corrected memory errors:
\t{c} total
\t{c} in 24h
uncorrected memory errors:
\t{u} total
\t{u} in 24h
"""


def test_mcelog_fails_over_nhcs_default_rates(node):
    node.stub("mcelog", "echo 'mcelog: client connect: Connection refused' >&2\nexit 1\n")
    assert node.verdict("check_hw_mcelog") == 0  # no daemon: NHC passes
    node.stub("mcelog", "printf '%s' '" + MCELOG.format(c=9, u=0) + "'\n")
    assert node.verdict("check_hw_mcelog") == 0  # at MCELOG_MAX_CORRECTED_RATE (9)
    node.stub("mcelog", "printf '%s' '" + MCELOG.format(c=10, u=0) + "'\n")
    assert node.verdict("check_hw_mcelog") == 1
    node.stub("mcelog", "printf '%s' '" + MCELOG.format(c=0, u=1) + "'\n")
    assert node.verdict("check_hw_mcelog") == 1


# -- file systems ------------------------------------------------------------------------


def test_mount_rw_fails_when_remounted_read_only(node):
    line = "check_fs_mount_rw -f /"
    assert node.verdict(line) == 0
    node.write("proc/self/mounts", node.proc.joinpath("self/mounts").read_text().replace(
        "/dev/sda1 / ext4 rw,", "/dev/sda1 / ext4 ro,"))  # fmt: skip
    assert node.verdict(line) == 1


def test_mount_type_source_and_options(node):
    # NHC's sample config lines, on the node's mount table.
    assert node.verdict("check_fs_mount_rw -t tmpfs -f /tmp") == 0
    assert node.verdict("check_fs_mount_rw -t devpts -s '/(none|devpts)/' -f /dev/pts") == 0
    nfs3 = "check_fs_mount -s bluearc0:/home -t nfs -o '/(^|,)vers=3(,|$)/' -f /home"
    assert node.verdict(nfs3) == 0
    assert node.verdict("check_fs_mount_rw -t xfs -f /tmp") == 1
    node.write(
        "proc/self/mounts",
        node.proc.joinpath("self/mounts").read_text().replace("vers=3", "vers=4.2"),
    )
    assert node.verdict(nfs3) == 1
    node.write("proc/self/mounts", "/dev/sda1 / ext4 rw 0 0\n")  # /home gone
    assert node.verdict(nfs3) == 1
    assert node.verdict("check_fs_mount_ro /") == 1  # deprecated positional syntax


@pytest.mark.parametrize(
    ("line", "used_kb", "nhc_rc"),
    [
        ("check_fs_free / 3%", 96_000, 0),  # df Use% 96: 4 % free
        ("check_fs_free / 3%", 97_100, 1),  # Use% rounds up to 98: 2 % free
        ("check_fs_free / 128MB", 100_000 - 140_000 // 1024 * 1024 // 1024, 1),
        ("check_fs_used / 98%", 97_000, 0),
        ("check_fs_used / 98%", 98_000, 1),  # NHC: Use% >= threshold fails
        ("check_fs_size / 90000 110000", 50_000, 0),
        ("check_fs_size / 512m 4g", 50_000, 1),
    ],
)
def test_fs_space_follows_dfs_percentages(node, line, used_kb, nhc_rc):
    node.df("/", size_kb=100_000, used_kb=used_kb)
    assert node.verdict(line) == nhc_rc


def test_fs_space_passes_where_nhc_finds_no_such_mount_point(node):
    # NHC reads df and checks only its mount points: /var is none here.
    assert node.verdict("check_fs_free /var 5%") == 0
    node.write("proc/self/mounts", MOUNTS_PLUS_VAR)
    node.df("/var", size_kb=100_000, used_kb=99_000)
    assert node.verdict("check_fs_free /var 5%") == 1


MOUNTS_PLUS_VAR = "/dev/sda1 / ext4 rw 0 0\n/dev/sda3 /var xfs rw 0 0\n"


def test_inodes(node):
    node.df("/tmp", size_kb=10_000, used_kb=1_000, inodes=100_000, ifree=50_000)
    assert node.verdict("check_fs_ifree /tmp 1k") == 0
    assert node.verdict("check_fs_iused /tmp 1M") == 0
    assert node.verdict("check_fs_inodes /tmp 1k") == 0
    node.df("/tmp", size_kb=10_000, used_kb=1_000, inodes=100_000, ifree=500)
    assert node.verdict("check_fs_ifree /tmp 1k") == 1
    assert node.verdict("check_fs_iused /tmp 99%") == 1  # lambdal-nhc.conf's percent form
    assert node.verdict("check_fs_iused /tmp 99000") == 1


# -- files -------------------------------------------------------------------------------


def test_file_test_fails_when_tmp_loses_its_sticky_bit(node, tmp_path):
    d = tmp_path / "tmpdir"
    d.mkdir()
    d.chmod(0o1777)
    line = f"check_file_test -r -w -x -d -k {d}"
    assert node.verdict(line) == 0
    d.chmod(0o777)
    assert node.verdict(line) == 1
    d.rmdir()
    assert node.verdict(line) == 1


def test_file_test_not_empty_and_char_device(node, tmp_path):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert node.verdict(f"check_file_test -r -s {f}") == 0
    assert node.verdict("check_file_test -c -r -w /dev/null") == 0
    f.write_text("")
    assert node.verdict(f"check_file_test -r -s {f}") == 1
    assert node.verdict(f"check_file_test -c {f}") == 1


def test_file_stat_mode_owner_and_age(node, tmp_path):
    f = tmp_path / "conf"
    f.write_text("x")
    f.chmod(0o644)
    me = os.getuid()
    assert node.verdict(f"check_file_stat -m 0644 -u {me} -n 7200 {f}") == 0
    f.chmod(0o666)
    assert node.verdict(f"check_file_stat -m 0644 {f}") == 1
    assert node.verdict(f"check_file_stat -M 0644 {f}") == 0  # at least those bits
    os.utime(f, (1, 1))  # syslog silent for decades
    assert node.verdict(f"check_file_stat -n 7200 {f}") == 1
    assert node.verdict(f"check_file_stat -u {me + 1} {f}") == 1
    assert node.verdict("check_file_stat -m 0666 -u 0 -g 0 -t 1 -T 3 /dev/null") == 0


def test_file_contents(node, tmp_path):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0:root:/root:/bin/bash\nsshd:x:74:74::/var/empty/sshd:/sbin/nologin\n")
    line = f'check_file_contents {f} "/^root:x:0:0:/" "sshd:*"'
    assert node.verdict(line) == 0
    assert node.verdict(f"check_file_contents {f} '!/localhost/'") == 0
    f.write_text("root:x:0:0:root:/root:/bin/bash\nlocalhost\n")
    assert node.verdict(line) == 1  # sshd's account is gone
    assert node.verdict(f"check_file_contents {f} '!/localhost/'") == 1


# -- processes ---------------------------------------------------------------------------


def test_ps_service_fails_when_sshd_dies(node):
    node.process(1, "/sbin/init")
    node.process(812, "/usr/sbin/sshd -D", uid=0)
    line = "check_ps_service -u root -S sshd"
    assert node.verdict(line) == 0
    node.kill(812)
    assert node.verdict(line) == 1
    node.process(813, "/usr/sbin/sshd -D", uid=74)  # running, but not as root
    assert node.verdict(line) == 1


def test_ps_daemon_and_blacklist(node):
    node.process(1, "/sbin/init")
    node.process(900, "/usr/sbin/wulfd", uid=0)
    assert node.verdict("check_ps_daemon wulfd root") == 0
    assert node.verdict("check_ps_blacklist sshd '!root'") == 0
    node.process(901, "/usr/sbin/sshd", uid=1001)  # a user's own sshd
    assert node.verdict("check_ps_blacklist sshd '!root'") == 1
    node.kill(900)
    assert node.verdict("check_ps_daemon wulfd root") == 1


def test_ps_service_restart_is_off_unless_asked(node):
    node.process(1, "/sbin/init")
    node.stub("systemctl", f'echo "$@" > {node.root}/restarted\n')
    assert node.verdict("check_ps_service -r crond") == 1
    assert not (node.root / "restarted").exists()  # NHC's -r is not carried by default
    cfg = SiteChecksConfig.from_section(
        [{"kind": "ps_service", "service": "crond", "restart": True}], path=None, prefix="s"
    )
    findings = node.run(cfg)
    assert [f.status for f in findings] == [Status.FAIL]
    assert (node.root / "restarted").read_text().split() == ["restart", "--", "crond"]


def test_unauthorised_users(node):
    node.process(1, "/sbin/init")
    node.process(500, "/usr/sbin/slurmd", uid=0)
    node.process(501, "slurmstepd: [42.batch]", uid=0, ppid=500)
    node.process(502, "/bin/bash job.sh", uid=1000, ppid=501)
    node.process(503, "python train.py", uid=1000, ppid=1)  # alice's, escaped the job
    assert node.verdict("check_ps_unauth_users") == 0  # alice runs a job here
    assert node.verdict("check_ps_userproc_lineage") == 1  # but 503 is not under slurmd
    node.kill(503)
    assert node.verdict("check_ps_userproc_lineage") == 0
    node.process(600, "/tmp/miner", uid=1001, ppid=1)  # mallory has no job
    assert node.verdict("check_ps_unauth_users") == 1
    # NHC's "log syslog kill" without "die" never fails the check.
    assert node.verdict("check_ps_unauth_users log syslog kill") == 0


def test_a_forbidden_program_a_user_runs_is_theirs_not_the_nodes(node):
    """A program that must not run (NHC's check_ps_blacklist), found running
    as a user's: the user chose to run it, so the finding is
    PS_FORBIDDEN_USER (drained, no job moved: core/user_caused.py); found
    as root's it is the node's own PS_SERVICE."""
    from slurm_hooks.core.user_caused import USERS_CAUSE

    node.process(1, "/sbin/init")
    node.process(700, "/home/mallory/xmrig", uid=1001, ppid=1)
    cfg = SiteChecksConfig.from_section(
        [{"kind": "ps_service", "service": "xmrig", "running": False}], path=None, prefix="s"
    )
    [f] = node.run(cfg)
    assert (f.status, f.code) == (Status.FAIL, "PS_FORBIDDEN_USER") and f.code in USERS_CAUSE
    node.kill(700)
    node.process(701, "/usr/sbin/xmrig", uid=0, ppid=1)
    [f] = node.run(cfg)
    assert (f.status, f.code) == (Status.FAIL, "PS_SERVICE") and f.code not in USERS_CAUSE


def test_a_processs_arguments_reach_the_finding_as_one_printable_line(node):
    """mallory's process arguments are mallory's words: an escape sequence
    (OSC 52 writes an admin's clipboard) or a newline must not reach the
    audit log, alerts or the terminal of whoever reads them."""
    node.process(1, "/sbin/init")
    node.process(600, "/tmp/x \x1b]52;c;cm0gLXJmIH4=\x07\nFAKE: all good", uid=1001, ppid=1)
    cfg = SiteChecksConfig.from_section([{"kind": "ps_users"}], path=None, prefix="s")
    [f] = node.run(cfg)
    assert f.status is Status.FAIL and "process 600" in f.message
    assert f.message.isprintable() and "FAKE: all good" in f.message


def test_loadavg_per_core(node):
    assert node.verdict("check_ps_loadavg 24") == 0
    assert node.verdict("check_ps_loadavg $((2*HW_CORES))") == 0
    node.write("proc/loadavg", "30.00 20.00 10.00 1/200 12345\n")
    assert node.verdict("check_ps_loadavg 24") == 1
    assert node.verdict("check_ps_loadavg $((2*HW_CORES))") == 1  # 2 x 12 cores
    assert node.verdict("check_ps_loadavg '' 30") == 0
    assert node.verdict("check_ps_loadavg '' 20") == 1  # NHC: 20 >= 20 fails
    node.write("proc/loadavg", "23.99 0.00 0.00 1/200 12345\n")
    assert node.verdict("check_ps_loadavg 24") == 0  # NHC reads 23


# -- commands ----------------------------------------------------------------------------


def test_cmd_status_selinux_disabled(node):
    node.stub("selinuxenabled", "exit 1\n")
    assert node.verdict("check_cmd_status -t 1 -r 1 selinuxenabled") == 0
    node.stub("selinuxenabled", "exit 0\n")
    assert node.verdict("check_cmd_status -t 1 -r 1 selinuxenabled") == 1


def test_cmd_output_matches_and_timeout(node):
    node.stub(
        "timedatectl", "echo '      System clock synchronized: yes'\necho 'NTP synchronized: yes'\n"
    )
    line = "check_cmd_output -t 2 -m 'NTP synchronized: yes' -e 'timedatectl'"
    assert node.verdict(line) == 0
    node.stub("timedatectl", "echo 'NTP synchronized: no'\n")
    assert node.verdict(line) == 1
    node.stub("timedatectl", "sleep 5\n")
    assert node.verdict(line.replace("-t 2", "-t 0.3")) == 1  # NHC: timeout fails


def test_commands_run_side_by_side_and_report_in_config_order(node, tmp_path):
    # Each waits (up to 2 s) for the other to have started: run one after
    # the other, as NHC runs them, the first would time out and fail.
    for me, other in (("first", "second"), ("second", "first")):
        node.stub(
            me,
            f"touch {tmp_path}/{me}\n"
            f"for i in $(seq 40); do [ -e {tmp_path}/{other} ] && exit 0; sleep 0.05; done\n"
            "exit 1\n",
        )
    node.stub("never", "exit 3\n")
    conf = (
        "* || check_cmd_status -t 4 -r 0 first\n"
        "* || check_cmd_status -t 4 -r 0 never\n"
        "* || check_fs_mount_rw -f /nowhere\n"
        "* || check_cmd_status -t 4 -r 0 second\n"
    )
    from slurm_hooks.detect.site.nhc_import import import_conf

    imp = import_conf(conf)
    cfg = SiteChecksConfig.from_section(imp.rows, path=None, prefix="site_checks")
    failed = [f.values["site_check"] for f in node.run(cfg) if f.status is Status.FAIL]
    assert failed == ["command-l2", "fs-mount-l3"]


def test_a_site_functions_run_directory_is_private_and_removed(node, scripts, monkeypatch):
    tmp = scripts.parent / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    modes = []
    real_run = node.services()["run_command"]

    def run(argv, **kw):
        modes.append(os.stat(argv[5]).st_mode & 0o777)
        return real_run(argv, **kw)

    services = {**node.services(), "run_command": run}
    monkeypatch.setattr(node, "services", lambda: services)
    node.write("proc/vmstat", "oom_kill 0\n")
    site = _site(scripts, SITE_VMSTAT=str(node.proc / "vmstat"))
    assert node.verdict("check_site_oom 2", variables=site) == 0
    assert modes == [0o700]
    assert list(tmp.iterdir()) == []


def test_ifconfig_output_with_posix_classes(node):
    out = "eth3: flags=4163<UP,BROADCAST>\n   UP BROADCAST RUNNING  MTU:1500\n   inet addr:10.0.0.1  Bcast:10.0.0.255  Mask:255.255.255.0\n"
    node.stub("ifconfig", f"printf '%s' '{out}'\n")
    line = (
        f"check_cmd_output -m '/addr:10\\.0\\.0\\.1/' -m '/Bcast:10\\.0\\.0\\.255/' "
        f"-m '/Mask:255\\.255\\.255\\.0/' -m '/^[[:space:]]*UP /' {node.bin}/ifconfig eth3"
    )
    assert node.verdict(line) == 0
    node.stub("ifconfig", f"printf '%s' '{out.replace('10.0.0.1 ', '10.0.0.9 ')}'\n")
    assert node.verdict(line) == 1


# -- DMI: NHC's test/test_lbnl_dmi.nhc data (a PowerEdge 1950) and verdicts --------------

DMI_CASES = [
    ('check_dmi_raw_data_match "/Core Count: 4/"', 0),
    ('check_dmi_raw_data_match "*Manufacturer*Dell Inc*"', 0),
    ('check_dmi_raw_data_match "/Current Speed: 9999 MHz/"', 1),
    ('check_dmi_raw_data_match "*Height*4 U*"', 1),
    ("check_dmi_raw_data_match '!' \"/Socket LGA771/\"", 1),
    ("check_dmi_raw_data_match '!' \"*3.00GHz*\"", 1),
    ("check_dmi_raw_data_match '!' \"/Intel.*Xeon.*E5-2440/\"", 0),
    ("check_dmi_raw_data_match '!' \"*Voltage*9.5 V*\"", 0),
    ('check_dmi_data_match "/Core Count: 4/"', 0),
    ('check_dmi_data_match "*Manufacturer*Dell Inc*"', 0),
    ('check_dmi_data_match "/Current Speed: 9999 MHz/"', 1),
    ('check_dmi_data_match "*Height*4 U*"', 1),
    ("check_dmi_data_match '!' \"/Socket LGA771/\"", 1),
    ("check_dmi_data_match '!' \"*3.00GHz*\"", 1),
    ("check_dmi_data_match '!' \"/Intel.*Xeon.*E5-2440/\"", 0),
    ("check_dmi_data_match '!' \"*Voltage*9.5 V*\"", 0),
    ('check_dmi_data_match "BIOS Information: Version: 2.0.1"', 0),
    ('check_dmi_data_match "/^Thread Count: 4/"', 1),
    ("check_dmi_data_match '/^Processor Information: Characteristics: 64-bit capable$/'", 0),
]


@pytest.mark.parametrize(("line", "nhc_rc"), DMI_CASES)
def test_dmi_verdicts_match_nhcs_test_suite(node, line, nhc_rc):
    node.stub("dmidecode", f"cat {DATA / 'dmidecode-poweredge1950.txt'}\n")
    assert node.verdict(line) == nhc_rc


def test_dmi_fails_after_a_bios_change(node, tmp_path):
    dump = tmp_path / "dmi.txt"
    dump.write_text((DATA / "dmidecode-poweredge1950.txt").read_text())
    node.stub("dmidecode", f"cat {dump}\n")
    line = 'check_dmi_data_match "BIOS Information: Version: 2.0.1"'
    assert node.verdict(line) == 0
    dump.write_text(dump.read_text().replace("\tVersion: 2.0.1", "\tVersion: 2.7.0"))
    assert node.verdict(line) == 1


# -- the site's own NHC functions (kind nhc_function) --------------------------------------
# tests/data/nhc/scripts/site_checks.nhc, written as site functions are.  NHC's
# verdicts and die messages were recorded by running NHC's own driver (mej/nhc
# at 9c4a38c, `nhc -e LINE INCDIR=<that dir plus NHC's scripts> NHC_RM=slurm`,
# and a full run with `-t 2` for the timeout) on the same node states, outside
# the tests (nothing of NHC is committed); NHC's text names the program $NAME
# ("nhc" when installed).


@pytest.fixture
def scripts(tmp_path):
    """The site's scripts directory, a copy the test's user owns (root
    refuses scripts another user owns, and a checkout may be anyone's)."""
    d = tmp_path / "nhc-scripts"
    d.mkdir()
    for f in (DATA / "scripts").glob("*.nhc"):
        (d / f.name).write_text(f.read_text())
    return d


def _site(scripts: Path, **extra: str) -> dict[str, str]:
    """What /etc/sysconfig/nhc would say on this node (the scripts dir)."""
    return {"INCDIR": str(scripts), **extra}


def _fn_finding(node: Node, line: str, variables: dict[str, str]):
    from slurm_hooks.detect.site.nhc_import import import_conf

    imp = import_conf(f"* || {line}", variables=variables)
    assert [r["kind"] for r in imp.rows] == ["nhc_function"]
    cfg = SiteChecksConfig.from_section(imp.rows, path=None, prefix="site_checks")
    (f,) = node.run(cfg)
    return f


def test_site_function_fails_with_the_message_it_died_with(node, scripts):
    vmstat = node.write("proc/vmstat", "nr_free_pages 1\noom_kill 0\n")
    site = _site(scripts, SITE_VMSTAT=str(vmstat))
    assert node.verdict("check_site_oom 2", variables=site) == 0  # NHC: 0
    node.write("proc/vmstat", "nr_free_pages 1\noom_kill 3\n")
    assert node.verdict("check_site_oom 2", variables=site) == 1  # NHC: 1
    f = _fn_finding(node, "check_site_oom 2", site)
    assert (f.status, f.code, f.action) == (Status.FAIL, "NHC_FUNCTION", Action.DRAIN)
    # NHC's note: "check_site_oom:  3 processes killed for lack of memory (limit 2)".
    assert (
        f.message
        == "nhc-function-l1: check_site_oom:  3 processes killed for lack of memory (limit 2)"
    )
    assert (f.values["function"], f.values["rc"]) == ("check_site_oom", 1)


def test_site_function_status_without_die_fails_with_nhcs_text(node, scripts, tmp_path):
    marker = tmp_path / "marker"
    marker.write_text("")
    line = f"check_site_marker {marker}"
    assert node.verdict(line, variables=_site(scripts)) == 0  # NHC: 0
    marker.unlink()
    assert node.verdict(line, variables=_site(scripts)) == 1  # NHC: 1
    assert _fn_finding(node, line, _site(scripts)).message.endswith(f"Check {line} returned 1")


def test_a_site_functions_die_text_reaches_the_finding_as_one_printable_line(node, scripts):
    """A site's own function that quotes what a user wrote (a file name, a
    process's arguments) in its ``die`` passes the user's escape sequences
    on: the finding's message (audit log, alerts, terminals) keeps none."""
    (scripts / "quotes.nhc").write_text(
        "function check_site_quotes() {\n"
        "  die 1 \"bad file: $(printf 'x\\033]52;c;cm0gLXJmIH4=\\007\\033[2K y')\"\n"
        "}\n"
    )
    f = _fn_finding(node, "check_site_quotes", _site(scripts))
    assert f.status is Status.FAIL and "bad file: x" in f.message
    assert f.message.isprintable() and "\x1b" not in f.message


def test_site_function_values_are_never_evaluated(node, scripts, tmp_path):
    # The import refuses $(...) in a line; a hand-written row is passed as
    # words all the same: arguments, variables and the directory are data.
    planted = [tmp_path / f"planted{i}" for i in range(3)]
    cfg = SiteChecksConfig.from_section(
        [{"kind": "nhc_function", "function": "check_site_marker",
          "args": [f"$(touch {planted[0]})", f"; touch {planted[1]}"],
          "env": {"SITE_VMSTAT": f"`touch {planted[2]}`"}, "scripts_dir": str(scripts)}],
        path=None, prefix="site_checks",
    )  # fmt: skip
    (f,) = node.run(cfg)
    assert f.status is Status.FAIL  # no file of that name: the words as given
    assert not any(p.exists() for p in planted)


def test_site_function_runs_the_sites_commands_and_a_subshells_die_ends_only_it(node, scripts):
    smi = node.bin / "nvidia-smi"
    site = _site(scripts, NVIDIA_SMI=str(smi))
    gpus = (
        'for i in 0 1 2 3 4 5 6 7; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done\n'
    )
    node.stub("nvidia-smi", gpus)
    assert node.verdict("check_site_gpus 8", variables=site) == 0  # NHC: 0
    node.stub("nvidia-smi", gpus.replace(" 7;", ";"))
    assert node.verdict("check_site_gpus 8", variables=site) == 1  # NHC: 1
    assert _fn_finding(node, "check_site_gpus 8", site).message.endswith(
        "check_site_gpus:  7 GPUs of 8 visible"
    )
    node.stub("nvidia-smi", "echo 'NVIDIA-SMI has failed'\nexit 9\n")
    # The helper's die in $(...) ends that subshell (its log line lands in
    # the captured output, as under NHC); the check's own die is the reason.
    assert _fn_finding(node, "check_site_gpus 8", site).message.endswith(
        "check_site_gpus:  ERROR:  nhc:  Health check failed:  site_gpu_count:  "
        f"{smi} -L failed GPUs of 8 visible"
    )


def test_site_function_past_its_timeout_fails(node, scripts):
    cfg = SiteChecksConfig.from_section(
        [{"name": "slow", "kind": "nhc_function", "function": "check_site_slow", "args": ["10"],
          "scripts_dir": str(scripts), "timeout_s": 0.5}],
        path=None, prefix="site_checks",
    )  # fmt: skip
    (f,) = node.run(cfg)
    # NHC (-t 2): "Script timed out while executing "check_site_slow 10"", exit 142.
    assert (f.status, f.code) == (Status.FAIL, "NHC_FUNCTION")
    assert f.message == "slow: check_site_slow 10: timed out after 0.5s"


def test_site_function_timing_its_command_with_nhcs_watchdog_timer(node, scripts):
    # NHC's check_cmd_status times its command with the driver's
    # nhcmain_watchdog_timer; a site function may too.  NHC: 0, and 1 with
    # 'check_site_timed:  142 returned by "sleep 5"' (SIGALRM after 1 s).
    assert node.verdict("check_site_timed 5 true", variables=_site(scripts)) == 0
    f = _fn_finding(node, "check_site_timed 1 sleep 5", _site(scripts))
    assert f.status is Status.FAIL
    assert f.message.endswith('check_site_timed:  142 returned by "sleep 5"')


def test_a_process_the_function_leaves_running_does_not_hold_the_check(node, scripts):
    # Its helper sleeps 5 s after the function returned; the check does not
    # wait for it (NHC: 0 at once), so 2 s is plenty.
    cfg = SiteChecksConfig.from_section(
        [{"name": "helper", "kind": "nhc_function", "function": "check_site_helper",
          "args": ["5"], "scripts_dir": str(scripts), "timeout_s": 2.0}],
        path=None, prefix="site_checks",
    )  # fmt: skip
    assert [f.status for f in node.run(cfg)] == [Status.OK]


def test_an_unknown_site_function_fails_and_says_why(node, scripts, tmp_path):
    # NHC: "check_site_nope: command not found", exit 127: the node fails.
    assert node.verdict("check_site_nope", variables=_site(scripts)) == 1
    f = _fn_finding(node, "check_site_nope", _site(scripts))
    assert f.message == (
        f"nhc-function-l1: check_site_nope is not defined: none of the 1 *.nhc script(s) in {scripts} defines it"
    )
    empty = tmp_path / "no-scripts"
    empty.mkdir()
    f = _fn_finding(node, "check_site_oom", {"INCDIR": str(empty)})
    assert f.status is Status.FAIL
    assert f.message.endswith(f"check_site_oom is not defined: no *.nhc script in {empty}")


def test_scripts_anyone_could_have_written_are_not_run(node, scripts, tmp_path):
    # The config file's rule (docs/security.md): world-writable, or (for
    # root) owned by another user, is refused; nothing of it runs.
    ran = tmp_path / "ran"
    (scripts / "zz_planted.nhc").write_text(f"touch {ran}\n")
    vmstat = node.write("proc/vmstat", "oom_kill 0\n")
    line = "check_site_oom 2"
    assert node.verdict(line, variables=_site(scripts, SITE_VMSTAT=str(vmstat))) == 0
    assert ran.exists()  # a trusted directory: every script is sourced, as NHC does
    ran.unlink()
    (scripts / "zz_planted.nhc").chmod(0o666)
    f = _fn_finding(node, line, _site(scripts, SITE_VMSTAT=str(vmstat)))
    assert (f.status, f.code) == (Status.UNKNOWN, "CHECK_UNKNOWN")
    assert "zz_planted.nhc is world-writable" in f.message and not ran.exists()
    (scripts / "zz_planted.nhc").chmod(0o644)
    scripts.chmod(0o777)
    f = _fn_finding(node, line, _site(scripts, SITE_VMSTAT=str(vmstat)))
    assert f.status is Status.UNKNOWN and f"{scripts} is world-writable" in f.message
    scripts.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(scripts / "zz_planted.nhc", 1001, 1001)
        f = _fn_finding(node, line, _site(scripts, SITE_VMSTAT=str(vmstat)))
        assert f.status is Status.UNKNOWN and "owned by uid 1001, not root" in f.message
        assert not ran.exists()


def test_nvidia_healthmon_lines_are_the_gpu_checks(tmp_path):
    """NHC's GPU checks import as the built-in NVML checks (no site check):
    those pass the healthy node NHC passes and fail the nodes NHC fails.
    NHC's verdicts: its test suite (test_lbnl_nv.nhc: healthmon's "Load
    NVML ... CRITICAL ERROR" is 1, all SUCCESS 0) and csc_nvidia_smi.nhc
    (nvidia-smi's status 9, driver not loaded, and 15, a GPU fallen off the
    bus, are 1)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.runner import run_phase
    from slurm_hooks.detect.site.nhc_checks import GPU_BUILTIN
    from slurm_hooks.detect.site.nhc_import import import_conf

    imp = import_conf("* || check_nv_healthmon\n* || check_nvsmi_healthmon\n")
    assert not imp.untranslated and not imp.rows
    assert {t.builtin for t in imp.translated} == {GPU_BUILTIN}
    checks = [c.strip() for c in GPU_BUILTIN.split("(")[0].split(",")]
    lost = tmp_path / "lost.toml"
    lost.write_text('preset = "h100-sxm5-80gb"\ngpu_count = 8\n[gpu.3]\nlost = true\n')
    kern = tmp_path / "kern.log"
    kern.write_text("")

    def verdict(scenario: Path) -> int:
        text = (
            f'[general]\nstate_dir = "{tmp_path / "state"}"\n[checks]\n'
            f'sysfs_root = "{DATA.parent / "sysfs" / "dgx_h100_healthy"}"\n'
            f'nvml = "lab:fake"\nnvml_scenario = "{scenario}"\n'
            '[profiles.h100]\nbase = "h100-sxm5-80gb"\nnodes = "gpu[001-004]"\nmemory_gb = 1\n'
        )
        r = run_phase("healthcheck", cfg=config_mod.parse(text), node="gpu001", only=checks)
        return r.exit_code

    nvml = DATA.parent / "nvml"
    assert verdict(nvml / "h100_healthy.toml") == 0  # NHC: 0
    assert verdict(nvml / "driver_not_loaded.json") == 1  # NHC: 1 (no NVML / status 9)
    assert verdict(lost) == 1  # NHC: 1 (status 15)


# -- hosts, findings, config ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "node_name", "runs"),
    [
        ("*", "n0001", True), ("n000*", "n0001", True), ("!n000*", "n0001", False),
        ("/^n00[0-5][0-9]$/", "n0017", True), ("/^n00[0-5][0-9]$/", "n0083", False),
        ("{n00[00-99]}", "n0030", True), ("{n00[00-99]}", "n0100", False),
        ("!{n03,n05,n0[7-9]}", "n05", False), ("!{n03,n05,n0[7-9]}", "n06", True),
        ("s[0-300]", "s3", True), ("s[0-300]", "s250", False),  # a glob: [0-300] is 0-3
    ],
)  # fmt: skip
def test_targets_select_hosts_as_nhc_does(node, target, node_name, runs):
    # The README's match-string examples.  A check that cannot pass shows
    # whether the line ran on this node.
    assert node.verdict(f"{target} || check_hw_cpuinfo 99", node=node_name) == (1 if runs else 0)


def test_feature_selector(node):
    cfg = SiteChecksConfig.from_section(
        [{"kind": "hw_cpuinfo", "sockets": 99, "feature": "nvme"}], path=None, prefix="site_checks"
    )
    services = {"site_checks": cfg, **node.services()}
    from slurm_hooks.core.model import Phase
    from slurm_hooks.detect.checks.base import CheckContext
    from slurm_hooks.detect.site.check import SiteChecks

    def run(features):
        ctx = CheckContext(node="n1", phase=Phase.HEALTHCHECK,
                           services={**services, "node_features": features})  # fmt: skip
        return SiteChecks().judge(SiteChecks().gather(ctx), ctx)

    assert [f.status for f in run(["nvme", "a100"])] == [Status.FAIL]
    assert [f.status for f in run(["a100"])] == [Status.OK]


def test_a_failure_is_a_drain_finding_in_the_reason_grammar(node):
    from slurm_hooks.core.reason import DrainReason, format_reason, parse_reason
    from slurm_hooks.decide.decide import component_token

    cfg = SiteChecksConfig.from_section(
        [{"name": "root-rw", "kind": "fs_mount", "paths": ["/"], "mode": "rw"}],
        path=None,
        prefix="s",
    )
    node.write("proc/self/mounts", "/dev/sda1 / ext4 ro 0 0\n")
    (f,) = node.run(cfg)
    assert (f.check, f.status, f.code, f.action) == ("site", Status.FAIL, "FS_MOUNT", Action.DRAIN)
    assert component_token(f) == "site:root-rw"
    reason = format_reason(
        DrainReason(code=f.code, component=component_token(f), incident="7f3a2c1b", text=f.message)
    )
    assert parse_reason(reason).component == "site:root-rw"


def test_non_fatal_is_a_warning_that_drains_nothing(node):
    node.write("proc/self/mounts", "/dev/sda1 / ext4 ro 0 0\n")
    imp_line = "check_fs_mount_rw -0 -f /"
    assert node.verdict(imp_line) == 0
    from slurm_hooks.detect.site.nhc_import import import_conf

    cfg = SiteChecksConfig.from_section(import_conf(f"* || {imp_line}").rows, path=None, prefix="s")
    (f,) = node.run(cfg)
    assert (f.status, f.action) == (Status.WARN, Action.NONE)


def test_a_check_that_cannot_run_is_unknown_not_healthy(node):
    cfg = SiteChecksConfig.from_section(
        [{"kind": "fs_space", "path": "/", "min_free": "1%"}], path=None, prefix="s"
    )
    node.statvfs.clear()  # statvfs fails (KeyError from the fake: an unreadable file system)
    (f,) = node.run(cfg)
    assert f.status is Status.UNKNOWN


@pytest.mark.parametrize(
    ("row", "key"),
    [
        ({"kind": "nope"}, "site_checks[0].kind"),
        ({"kind": "fs_mount", "paths": ["relative"]}, "site_checks[0].paths"),
        ({"kind": "fs_space", "path": "/", "min_free": "12"}, "site_checks[0].min_free"),
        (
            {"kind": "hw_memory", "min": "1GB", "max": "2GB", "whatever": 1},
            "site_checks[0].whatever",
        ),
        ({"kind": "command", "argv": ["true"], "name": "bad name"}, "site_checks[0].name"),
        ({"kind": "file_test", "paths": ["/tmp"], "tests": ["z"]}, "site_checks[0].tests"),
        ({"kind": "nhc_function", "function": "check_x; reboot"}, "site_checks[0].function"),
        (
            {"kind": "nhc_function", "function": "check_x", "scripts_dir": "scripts"},
            "site_checks[0].scripts_dir",
        ),
        (
            {"kind": "nhc_function", "function": "check_x", "env": {"MARK_OFFLINE": "1"}},
            "site_checks[0].env",
        ),
        (
            {"kind": "nhc_function", "function": "check_x", "env": {"A-B": "1"}},
            "site_checks[0].env",
        ),
    ],
)
def test_bad_rows_are_refused_with_the_key(row, key):
    with pytest.raises(ConfigError) as exc:
        SiteChecksConfig.from_section([row], path="/etc/x.toml", prefix="site_checks")
    assert key in str(exc.value)


def test_the_runner_runs_site_checks_only_where_the_config_has_them(node, tmp_path):
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.detect.runner import run_phase

    base = f'[general]\nstate_dir = "{tmp_path / "state"}"\n[checks.site]\nenforce = true\n'
    site = '[[site_checks]]\nname = "cpus"\nkind = "hw_cpuinfo"\nsockets = 2\n'
    services = {"nvml": None, **node.services()}
    plain = run_phase("healthcheck", cfg=config_mod.parse(base), node="n1", services=services)
    assert "site" not in plain.durations  # never imported without [[site_checks]]
    with_site = run_phase(
        "healthcheck", cfg=config_mod.parse(base + site), node="n1", services=services
    )
    assert "site" in with_site.durations
    assert not [f for f in with_site.findings if f.check == "site" and f.status is not Status.OK]
    node.write("proc/cpuinfo", cpuinfo(1, 6, 2))
    broken = run_phase(
        "healthcheck", cfg=config_mod.parse(base + site), node="n1", services=services
    )
    (f,) = [f for f in broken.findings if f.check == "site" and f.status is Status.FAIL]
    assert f.code == "HW_CPUINFO" and broken.exit_code == 1


def test_checks_site_settings_are_validated():
    from slurm_hooks.core import config as config_mod

    with pytest.raises(ConfigError) as exc:
        config_mod.parse('[checks.site]\ncompare_with = "nhc"\n')
    assert "absolute" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        config_mod.parse("[checks.site]\ncompare_whith = 1\n")
    assert "checks.site.compare_whith" in str(exc.value)


def test_every_kind_and_key_is_documented():
    import dataclasses

    from slurm_hooks.detect.site.kinds import KINDS

    doc = (Path(__file__).parent.parent / "docs" / "site-checks.md").read_text()
    rows = {ln.split("|")[1].strip(" `"): ln for ln in doc.splitlines() if ln.startswith("| `")}
    for kind in KINDS.values():
        assert kind.name in rows, kind.name
        for f in dataclasses.fields(kind.args):
            assert f"`{f.name}`" in rows[kind.name], (kind.name, f.name)


def test_net_ping_runs_ping_per_target(node):
    # NHC passes its options to `ping -q -n` for each target; a lost host fails.
    node.stub(
        "ping",
        f'for a; do last="$a"; done\n[ "$last" = master ] || exit 1\necho "$@" >> {node.root}/pinged\n',
    )
    assert node.verdict("check_net_ping -W 3 -c 2 master") == 0
    assert (node.root / "pinged").read_text().split() == [
        "-q",
        "-n",
        "-W",
        "3",
        "-c",
        "2",
        "--",
        "master",
    ]
    assert node.verdict("check_net_ping -W 3 -c 2 master io000") == 1


def test_gm_interface(node):
    (node.sys / "class" / "net" / "myri0").mkdir()
    assert node.verdict("check_hw_gm myri0") == 0
    (node.sys / "class" / "net" / "myri0").rmdir()
    assert node.verdict("check_hw_gm myri0") == 1
