"""Slurm's GPU numbers on this node, in NVML's numbering.

Slurm names a job's GPUs by their index in the node's GPU list (``IDX`` in
``scontrol -d show job``, ``SLURM_JOB_GPUS`` in the prolog); NVML, the
checks and every drain reason by their place in PCI bus order.  Which GPU
Slurm's index k is depends on how slurmd built its list (Slurm's source,
the same in 22.05, 24.11, 25.11 and 26.05):

* ``AutoDetect=nvml``: the list is sorted into NVML's order
  (``gres_gpu.c:_merge_system_gres_conf`` sorts by the links NVML gave,
  "a stand-in for PCI bus ID order"): index k is NVML's GPU k;
* ``AutoDetect=nvidia`` (24.11 on): the same merge sorts by device file
  and then by links, and this plugin gives none (``gpu_nvidia.c`` reads
  ``/proc/driver/nvidia/gpus``, naming each GPU ``/dev/nvidia<minor>``), so
  the files' natural order stands: index k is the GPU of the k-th lowest
  minor (the sort keeps equal links in place: glibc's ``qsort`` merge-sorts;
  measured on the lab through slurmd's ``fake_gpus.conf``, which feeds the
  same merge a found list without links);
* no autodetection: the list is gres.conf's ``File=`` entries as written
  (``gres.c:gres_node_config_load``, no sort): index k is the k-th file,
  and the file's device minor says which GPU it is
  (``/proc/driver/nvidia/gpus``).

Where the device minors follow the bus order (the usual case) the two are
the same and nothing needs reading.  Where they do not and gres.conf cannot
say which case holds (unreadable, another autodetect plugin, ``Links=``
beside ``AutoDetect=nvidia``, an ``Include`` it cannot follow), the order
is *unknown*: a caller must not guess which GPUs a job has (the prolog
would burn in another job's GPU, a GPU-scoped drain would spare the job on
the faulty one).  Everything read is root's: the
driver's list, slurmd's config, the device nodes.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from slurm_hooks.core import hostlist
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.record import record
from slurm_hooks.detect.probes.driver_gpus import PROC_GPUS, minor_positions
from slurm_hooks.slurm.conf_files import find_conf

log = logging.getLogger(__name__)

#: The NVIDIA driver's character-device major (``/dev/nvidiaN``).
NVIDIA_MAJOR = 195
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@record
class NodeGpuConf:
    """What gres.conf says of one node's GPUs."""

    #: The node's ``AutoDetect`` (lower case; its own line's over the
    #: global one); None where none is set.
    autodetect: str | None
    #: ``Name=gpu`` ``File=`` entries for the node, expanded, in order.
    files: tuple[str, ...]
    #: A ``Name=gpu`` line for the node sets ``Links=`` (which then orders
    #: found GPUs before their files do).
    links: bool = False


@record
class GpuOrder:
    """Slurm's GPU index -> NVML's, on this node."""

    #: Index -> NVML index; None with ``known``: Slurm's numbers are taken
    #: as they are (they agree, or no driver list to tell).
    places: Mapping[int, int] | None
    #: False: the numberings differ and which is which cannot be told.
    known: bool
    why: str

    def nvml(self, indices: Iterable[int]) -> tuple[int, ...] | None:
        """Slurm's ``indices`` in NVML's numbering, sorted; None when that
        cannot be told (the order unknown, an index Slurm's list lacks)."""
        idx = tuple(indices)
        if not self.known:
            return None
        if self.places is None:
            return tuple(sorted(idx))
        if any(i not in self.places for i in idx):
            return None
        return tuple(sorted(self.places[i] for i in idx))


def expand_files(spec: str) -> tuple[str, ...] | None:
    """gres.conf's ``File=`` in Slurm's order (as written, ranges in place):
    ``/dev/nvidia[2-3],/dev/nvidia0`` -> nvidia2, nvidia3, nvidia0.  Not
    ``core.hostlist.expand``: ClusterShell sorts, and here the written order
    is Slurm's numbering.  None for a form this does not read (two bracket
    groups in one name)."""
    out: list[str] = []
    for item in re.findall(r"[^,\[]*(?:\[[^\]]*\][^,\[]*)*", spec):
        if not item:
            continue
        if item.count("[") > 1:
            return None
        head, sep, rest = item.partition("[")
        if not sep:
            out.append(item)
            continue
        body, _, tail = rest.partition("]")
        for part in body.split(","):
            m = _RANGE.match(part.strip())
            if m is None:
                return None
            lo, hi = m.group(1), m.group(2) or m.group(1)
            width = len(lo) if lo.startswith("0") else 0
            out += [f"{head}{n:0{width}d}{tail}" for n in range(int(lo), int(hi) + 1)]
    return tuple(out)


#: How deep ``Include`` lines are followed (Slurm sets no limit; a loop
#: would hang slurmd, here it reads as unknown).
MAX_INCLUDE_DEPTH = 8


def _lines(text: str, include: Callable[[str], str | None] | None, depth: int) -> list[str] | None:
    """gres.conf's lines without comments, ``Include`` lines replaced by the
    file's (``parse_config.c``: one name after the word, a relative one in
    slurm.conf's directory, read by ``include``).  None where one cannot
    be read for certain: no reader, Slurm's ``%c`` or a glob (which Slurm
    skips), a file that cannot be read, too deep."""
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0].lower() != "include":
            out.append(line)
            continue
        name = words[1] if len(words) > 1 else ""
        if include is None or not name or "%" in name or "*" in name or depth >= MAX_INCLUDE_DEPTH:
            return None
        body = include(name)
        inner = _lines(body, include, depth + 1) if body is not None else None
        if inner is None:
            return None
        out += inner
    return out


def parse_gres_conf(
    text: str, node: str, include: Callable[[str], str | None] | None = None
) -> NodeGpuConf | None:
    """The ``AutoDetect`` and GPU files gres.conf gives ``node``; None for a
    file this cannot read for certain (an ``Include`` ``include`` cannot
    read, ``MultipleFiles``, a ``File=`` or ``NodeName=`` it cannot expand)."""
    auto_global: str | None = None
    auto_node: str | None = None
    files: list[str] = []
    links = False
    lines = _lines(text, include, 0)
    if lines is None:
        return None
    for line in lines:
        fields: dict[str, str] = {}
        for word in line.split():
            key, sep, value = word.partition("=")
            if sep:
                fields[key.lower()] = value
        if "multiplefiles" in fields:
            return None
        if "nodename" in fields:
            spec = fields["nodename"]
            try:
                if spec != node and not hostlist.contains(spec, node):
                    continue
            except ConfigError:
                return None
            mine = True
        else:
            mine = False
        if "autodetect" in fields:
            value = fields["autodetect"].lower()
            if mine:
                auto_node = value
            else:
                auto_global = value
        if fields.get("name", "").lower() != "gpu":
            continue
        links = links or "links" in fields
        if "file" in fields:
            got = expand_files(fields["file"])
            if got is None:
                return None
            files += got
    return NodeGpuConf(auto_node or auto_global, tuple(files), links)


def find_gres_conf(config: Mapping[str, str] | None = None) -> Path | None:
    """slurmd's gres.conf (``conf_files.find_conf``): beside the slurm.conf
    ``config`` or this process names, else where slurmd keeps it."""
    return find_conf("gres.conf", config)


def device_minor(path: str) -> int | None:
    """The minor of an NVIDIA GPU's character device, None for anything else."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != NVIDIA_MAJOR:
        return None
    return os.minor(st.st_rdev)


def _by_minors(
    minors: Sequence[int | None], places: Mapping[int, int], label: str
) -> GpuOrder | None:
    """Slurm's index k is the GPU whose device minor is ``minors[k]``; None
    where one is not a GPU the driver lists."""
    if any(m is None or m not in places for m in minors):
        return None
    mapping = {k: places[m] for k, m in enumerate(minors) if m is not None}
    if mapping == {k: k for k in mapping}:
        return GpuOrder(None, True, f"{label} is PCI bus order")
    return GpuOrder(mapping, True, f"{label}, by device minor")


def _reader(conf_dir: Path) -> Callable[[str], str | None]:
    """Reads an included file as slurmd does: a relative name in the config
    directory (``get_extra_conf_path``); None where it cannot be read."""

    def read(name: str) -> str | None:
        try:
            return (conf_dir / name).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("cannot read gres.conf's Include %s: %s", name, exc)
            return None

    return read


def gpu_order(node: str, *, gres_conf: Path | None = None, proc_root: str = PROC_GPUS) -> GpuOrder:
    """How Slurm's GPU indices on ``node`` (this host) map to NVML's."""
    places = minor_positions(proc_root)
    if places is None:
        return GpuOrder(None, True, "no driver GPU list: Slurm's numbers taken as NVML's")
    agree = places == {i: i for i in range(len(places))}
    path = gres_conf if gres_conf is not None else find_gres_conf()
    conf: NodeGpuConf | None = None
    if path is not None:
        try:
            conf = parse_gres_conf(
                path.read_text(encoding="utf-8", errors="replace"), node, _reader(path.parent)
            )
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc)
    if conf is not None and conf.autodetect == "nvml":
        return GpuOrder(None, True, "AutoDetect=nvml: Slurm numbers GPUs as NVML does")
    found: GpuOrder | None = None
    if conf is not None and conf.autodetect == "nvidia" and not conf.links:
        # The found GPUs (those File= names, else all the driver lists) in
        # device-file order: by minor.
        named = [device_minor(f) for f in conf.files] if conf.files else list(places)
        known = {m for m in named if m is not None}
        if None not in named:
            found = _by_minors(sorted(known), places, "AutoDetect=nvidia's device-file order")
    elif conf is not None and conf.autodetect in (None, "off") and conf.files:
        found = _by_minors([device_minor(f) for f in conf.files], places, "gres.conf's File= order")
    if found is not None:
        return found
    if agree:
        return GpuOrder(None, True, "device minors in PCI bus order")
    why = "device minors not in PCI bus order, and gres.conf " + (
        f"({path}) does not say how slurmd orders the GPUs" if path else "not found"
    )
    return GpuOrder(None, False, why)
