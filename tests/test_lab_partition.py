"""The lab's partition helper (slurm_hooks_lab/partition.py), without a lab:
the port range it cuts and what it reads back from tc."""

from __future__ import annotations

import pytest
from slurm_hooks_lab.partition import PortRange, parse_dropped

# `tc -s qdisc show dev lo` with the partition set, after two dropped SYNs
# (iproute2 6.1, kernel 6.18).
TC_STATS = """\
qdisc htb 1de1: root refcnt 2 r2q 10 default 0 direct_packets_stat 11 direct_qlen 1000
 Sent 100742 bytes 11 pkt (dropped 2, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc blackhole 1de2: parent 1de1:2
 Sent 0 bytes 0 pkt (dropped 2, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_an_aligned_range_has_one_mask_and_pins_open_mpi_to_it():
    ports = PortRange(46080, 16)
    assert ports.mask == "0xfff0"
    assert all(p & 0xFFF0 == 46080 for p in range(46080, 46096))
    assert 46096 & 0xFFF0 != 46080 and 46079 & 0xFFF0 != 46080
    assert ports.mpi_env() == {
        "OMPI_MCA_btl_tcp_port_min_v4": "46080",
        "OMPI_MCA_btl_tcp_port_range_v4": "16",
    }


@pytest.mark.parametrize(("first", "count"), [(46080, 12), (46081, 16), (0, 16), (65528, 16)])
def test_a_range_one_mask_cannot_match_is_refused(first, count):
    with pytest.raises(ValueError):
        PortRange(first, count)


def test_the_blackholes_drops_are_read_not_the_roots():
    assert parse_dropped(TC_STATS) == 2
    root_only = TC_STATS.replace(" (dropped 2,", " (dropped 7,", 1).split("qdisc blackhole")[0]
    assert parse_dropped(root_only) == 0
    assert parse_dropped("qdisc noqueue 0: root refcnt 2\n") == 0
