"""Per-SKU node profiles: what a healthy node of each kind looks like.

A profile is one ``[profiles.<name>]`` table in the config file::

    [profiles.h100]
    base = "h100-sxm5-80gb"          # start from a shipped example (data/profiles/)
    nodes = "gpu[001-128]"           # Slurm hostlist; first matching profile wins
    driver_version = "550.54.15"
    mounts = ["/home", "/scratch"]
    scratch_path = "/scratch"
    scratch_min_free_gb = 500
    [profiles.h100.ib]
    count = 8
    rate_gbps = 400
    device_pattern = "mlx5_*"

Selection: an explicit name (``--profile``), else the first profile whose
``nodes`` hostlist contains the node, else the profile named ``default``,
else an empty profile that expects nothing (checks then only report what
they see).  The shipped examples under ``slurm_hooks/data/profiles/`` are
complete config snippets: copy one into the config or name it in ``base``.

Every key is validated on load; an error names the file and the dotted key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from typing import Any

from slurm_hooks.core.config import Config, from_mapping
from slurm_hooks.core.errors import ConfigError
from slurm_hooks.core.record import field, fields, record, replace

#: Where the shipped example profiles live (one ``[profiles.<stem>]`` per file).
BUILTIN_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "profiles")
DEFAULT_NAME = "default"


class _MappingView(Mapping[str, Any]):
    """Lets a frozen dataclass be read as the plain mapping that
    ``CheckContext.profile`` promises (``profile.get("gpu_count")``), while
    our own checks use typed attributes."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))


@record
class IbExpect(_MappingView):
    """Expected InfiniBand/RoCE ports.  ``devices`` names ports that must be
    up (``mlx5_0`` means port 1, or ``mlx5_0/2``); ``count`` is how many
    ports matching ``device_pattern`` (and ``link_layer``) must be up."""

    #: Ports that must be present (those matching device_pattern and
    #: link_layer, or the named devices); fewer is IB_PORT_MISSING (drain).
    #: Unset: not counted.
    count: int | None = None
    #: Least link rate, Gb/s, of every active checked port; slower is IB_RATE
    #: (drain).  Unset: not judged.
    rate_gbps: float | None = None
    #: Ports that must exist and be active: ``mlx5_0`` (port 1) or
    #: ``mlx5_0/2``.  When set, device_pattern and link_layer are not used.
    devices: tuple[str, ...] = ()
    #: Shell-style pattern (fnmatch, case-sensitive) of the RDMA device names
    #: checked when devices is empty, e.g. ``"mlx5_*"``.
    device_pattern: str = "*"
    #: Only ports of this link layer: "InfiniBand" or "Ethernet" (RoCE);
    #: unset: both.
    link_layer: str | None = None

    def validate(self) -> None:
        if self.count is not None and self.count < 0:
            raise ValueError(f"count must be >= 0, got {self.count}")
        if self.rate_gbps is not None and self.rate_gbps <= 0:
            raise ValueError(f"rate_gbps must be > 0, got {self.rate_gbps}")
        if self.link_layer not in (None, "InfiniBand", "Ethernet"):
            raise ValueError(f"link_layer must be InfiniBand or Ethernet, got {self.link_layer!r}")
        for dev in self.devices:
            name, _, port = dev.partition("/")
            if not name or (port and not port.isdigit()):
                raise ValueError(f"devices: {dev!r} is not <device> or <device>/<port>")

    def wanted_ports(self) -> list[tuple[str, int]]:
        out = []
        for dev in self.devices:
            name, _, port = dev.partition("/")
            out.append((name, int(port) if port else 1))
        return out


@record
class Profile(_MappingView):
    """One SKU's expectations.  ``None`` means "do not check this"."""

    name: str = ""
    #: Slurm hostlist of the nodes this profile applies to.
    nodes: str | None = None
    #: Another profile (in this file, else a shipped example) to start from.
    base: str | None = None
    #: Free text for people; no check reads it.
    description: str = ""
    #: GPUs NVML must see: fewer is GPU_COUNT FAIL (reboot), more a WARN
    #: (wrong profile?).  0: a node without GPUs, the GPU checks are skipped.
    gpu_count: int | None = None
    #: Case-insensitive substring of ``nvmlDeviceGetName`` ("H100", "A100-SXM4-80GB").
    gpu_model: str | None = None
    #: Least PCIe generation (1..7) each GPU's link must be able to reach
    #: (NVML's max generation); lower is PCIE_DOWNTRAINED (drain).
    pcie_gen: int | None = None
    #: Expected PCIe link width per GPU (16 for x16); the check wants the
    #: larger of this and the GPU's own max width, narrower is a FAIL (drain).
    pcie_width: int | None = None
    #: NVLinks each GPU must have up; 0 skips the nvlink check; unset: the
    #: links NVML reports are checked, without a count.
    nvlinks_per_gpu: int | None = None
    #: Exact version, or a dotted prefix ("550" accepts 550.54.15).
    driver_version: str | None = None
    #: Oldest acceptable driver, dotted ("535.104"): compared number by
    #: number; older is DRIVER_VERSION (drain).
    driver_min_version: str | None = None
    #: Installed RAM in GiB (2 TB on the spec sheet = 2048); see [checks.memory] tolerance.
    memory_gb: float | None = None
    ib: IbExpect | None = None
    #: Absolute mount points that must be mounted, not read-only and (with
    #: [checks.mounts] write_test) writable; a miss drains the node.
    mounts: tuple[str, ...] = ()
    #: Absolute path whose file system's free space is checked; checked only
    #: together with scratch_min_free_gb.
    scratch_path: str | None = None
    #: Least free space on scratch_path, GiB; less (or a missing path) is a
    #: FAIL (drain).  Needs scratch_path.
    scratch_min_free_gb: float | None = None
    #: GPU temperature (deg C) at which gpu_temp WARNs; overrides
    #: [checks.gpu_temp] warn_c, and is the burn-in's default max_temp_c.
    gpu_temp_warn_c: float | None = None
    #: GPU temperature (deg C) at which gpu_temp FAILs (drain); overrides
    #: [checks.gpu_temp] fail_c.  Must be above gpu_temp_warn_c.
    gpu_temp_fail_c: float | None = None
    #: True: fabric manager must report completed; False: skip; None: check where NVML reports it.
    fabric_manager: bool | None = None
    #: True or unset: WARN for a GPU with persistence mode off; False: skip.
    persistence_mode: bool | None = True
    #: Floors for the burn-in and NCCL checks (checks/burnin.py, checks/nccl.py).
    burnin_min_tflops: float | None = None
    #: Intra-node all-reduce bus bandwidth floor, GB/s, for the NCCL check
    #: ([checks.nccl] busbw_floor_gbps overrides it).
    nccl_min_busbw_gbps: float | None = None
    #: Site- or check-specific SKU values with no key of their own yet.
    extra: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        for key in ("gpu_count", "nvlinks_per_gpu", "pcie_width"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ValueError(f"{key} must be >= 0, got {value}")
        if self.pcie_gen is not None and not 1 <= self.pcie_gen <= 7:
            raise ValueError(f"pcie_gen must be 1..7, got {self.pcie_gen}")
        if self.memory_gb is not None and self.memory_gb <= 0:
            raise ValueError(f"memory_gb must be > 0, got {self.memory_gb}")
        warn, fail = self.gpu_temp_warn_c, self.gpu_temp_fail_c
        if warn is not None and fail is not None and warn >= fail:
            raise ValueError(f"gpu_temp_warn_c ({warn:g}) must be below gpu_temp_fail_c ({fail:g})")
        for m in self.mounts:
            if not m.startswith("/"):
                raise ValueError(f"mounts: {m!r} is not an absolute path")
        if self.scratch_min_free_gb is not None and not self.scratch_path:
            raise ValueError("scratch_min_free_gb needs scratch_path")
        if self.scratch_path is not None and not self.scratch_path.startswith("/"):
            raise ValueError(f"scratch_path: {self.scratch_path!r} is not an absolute path")
        for key in ("driver_version", "driver_min_version"):
            value = getattr(self, key)
            if value is not None and not all(p.isdigit() for p in value.split(".")):
                raise ValueError(f"{key}: {value!r} is not a dotted version like 550.54.15")
        if self.nodes is not None:
            try:
                check_hostlist(self.nodes)
            except ConfigError as exc:
                raise ValueError(f"nodes: {exc}") from exc

    def matches(self, node: str) -> bool:
        if not self.nodes:
            return False
        if "[" not in self.nodes:
            # Plain lists need no ClusterShell import on the hook path.
            return node in (n.strip() for n in self.nodes.split(","))
        return hostlist_contains(self.nodes, node)


EMPTY = Profile(name="none", description="no profile matched: nothing expected")


# -- hostlist answers, remembered -------------------------------------------
#
# Validating ``nodes = "gpu[001-128]"`` and matching the node against it is
# ClusterShell's job, and importing ClusterShell costs a hook ~10 ms on every
# run for answers that never change: whether a hostlist parses and whether
# it contains this node are pure functions of the two strings.  So the
# answers are remembered in the process and, through load_hostlist_cache and
# save_hostlist_cache (the runner calls them around profile selection), in
# the state dir: a hook on a node whose config has not changed imports no
# ClusterShell.  Hostlists naming node groups (``@gpus``) depend on
# ClusterShell's group configuration, not only on the string: they are
# always asked afresh.  Only valid hostlists are remembered, so an invalid
# one is reported by ClusterShell every time.

#: File under the state dir holding remembered hostlist answers.
HOSTLIST_CACHE = "hostlists.json"
_CACHE_VERSION = 1
#: Beyond this many remembered answers, a save keeps only this run's.
_CACHE_MAX = 512


class _HostlistAnswers:
    def __init__(self) -> None:
        self.valid: set[str] = set()
        self.contains: dict[tuple[str, str], bool] = {}
        #: What this process asked (kept when the file outgrows _CACHE_MAX).
        self.used_valid: set[str] = set()
        self.used_contains: set[tuple[str, str]] = set()
        self.dirty = False


_answers = _HostlistAnswers()


def _rememberable(spec: str) -> bool:
    return "@" not in spec


def check_hostlist(spec: str) -> None:
    """Raise ConfigError unless ``spec`` is a valid hostlist (ClusterShell
    decides; a remembered valid answer skips it)."""
    a = _answers
    if spec in a.valid:
        a.used_valid.add(spec)
        return
    from slurm_hooks.core.hostlist import expand

    expand(spec)
    if _rememberable(spec):
        a.valid.add(spec)
        a.used_valid.add(spec)
        a.dirty = True


def hostlist_contains(spec: str, node: str) -> bool:
    """Whether hostlist ``spec`` names ``node`` (ClusterShell decides; a
    remembered answer skips it)."""
    a = _answers
    key = (spec, node)
    known = a.contains.get(key)
    if known is not None:
        a.used_contains.add(key)
        return known
    from slurm_hooks.core.hostlist import contains

    answer = contains(spec, node)
    if _rememberable(spec):
        a.contains[key] = answer
        a.used_contains.add(key)
        a.dirty = True
    return answer


def load_hostlist_cache(state_dir: str) -> None:
    """Add the answers remembered in ``state_dir`` to this process's.  A
    missing, unreadable or malformed file is ignored (answers are then
    asked from ClusterShell and saved again)."""
    import json

    path = os.path.join(state_dir, HOSTLIST_CACHE)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        return
    valid = data.get("valid")
    contains = data.get("contains")
    if not isinstance(valid, list) or not isinstance(contains, list):
        return
    a = _answers
    a.valid.update(v for v in valid if isinstance(v, str) and _rememberable(v))
    for item in contains:
        if (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], bool)
            and _rememberable(item[0])
        ):
            a.contains.setdefault((item[0], item[1]), item[2])


def save_hostlist_cache(state_dir: str) -> bool:
    """Write this process's answers to ``state_dir`` (atomically: temp file
    and rename) when ClusterShell was asked something new.  Creates the
    state dir as the lock does (0700): the prolog asks before anything else
    has made it, and a node's first prolog would otherwise leave its answers
    for the second to ask again.  Never raises: it is a cache.  True when
    written."""
    import json

    a = _answers
    if not a.dirty:
        return False
    valid, contains = a.valid, a.contains
    if len(valid) + len(contains) > _CACHE_MAX:
        valid = a.used_valid
        contains = {k: v for k, v in contains.items() if k in a.used_contains}
    data = {
        "version": _CACHE_VERSION,
        "valid": sorted(valid),
        "contains": [[spec, node, answer] for (spec, node), answer in sorted(contains.items())],
    }
    from slurm_hooks.store.atomicfile import ensure_dir, write_atomic

    try:
        ensure_dir(state_dir, 0o700)
        # A cache: losing it to a power cut costs one ClusterShell import.
        write_atomic(
            os.path.join(state_dir, HOSTLIST_CACHE),
            json.dumps(data, separators=(",", ":")),
            durable=False,
        )
    except OSError:
        return False
    a.dirty = False
    return True


def forget_hostlist_answers() -> None:
    """Drop every remembered answer in this process (tests)."""
    global _answers
    _answers = _HostlistAnswers()


@record
class Profiles:
    """The ``[profiles]`` section: name -> Profile, in file order."""

    profiles: Mapping[str, Profile] = field(default_factory=dict)
    path: str | None = None

    @classmethod
    def from_section(cls, data: Mapping[str, Any], *, path: str | None, prefix: str) -> Profiles:
        if not isinstance(data, Mapping):
            raise ConfigError("expected a table of profiles", path=path, key=prefix)
        out: dict[str, Profile] = {}
        for name, table in data.items():
            key = f"{prefix}.{name}"
            if not isinstance(table, Mapping):
                raise ConfigError(
                    f"expected a table [{key}], got {type(table).__name__}", path=path, key=key
                )
            merged = _resolve_base(name, data, path, prefix, seen=())
            if isinstance(merged.get("ib"), Mapping):
                # Validated here first: behind "IbExpect | None" the loader's
                # error would name only "<profile>.ib", not the bad key.
                merged["ib"] = from_mapping(IbExpect, merged["ib"], path=path, prefix=f"{key}.ib")
            prof = from_mapping(Profile, merged, path=path, prefix=key)
            out[name] = replace(prof, name=name)
        return cls(profiles=out, path=path)

    def __iter__(self) -> Iterator[Profile]:
        return iter(self.profiles.values())

    def get(self, name: str) -> Profile | None:
        if name in self.profiles:
            return self.profiles[name]
        if name in builtin_names():
            prof = load_builtin(name)
            return prof
        return None

    def select(self, node: str, name: str | None = None) -> Profile:
        """The profile for ``node``: explicit ``name``, else first hostlist
        match, else ``default``, else :data:`EMPTY`."""
        if name:
            prof = self.get(name)
            if prof is None:
                known = ", ".join(list(self.profiles) + builtin_names()) or "none"
                raise ConfigError(
                    f"no such profile (known: {known})", path=self.path, key=f"profiles.{name}"
                )
            return prof
        for prof in self.profiles.values():
            if prof.matches(node):
                return prof
        return self.profiles.get(DEFAULT_NAME, EMPTY)


def _resolve_base(
    name: str, data: Mapping[str, Any], path: str | None, prefix: str, seen: tuple[str, ...]
) -> dict[str, Any]:
    """The profile table with its ``base`` chain merged in (nearer wins;
    the ``ib`` and ``extra`` tables merge key by key).  ``data`` holds the
    config file's profiles, or is empty when resolving a shipped one; a
    ``base`` naming the profile itself means the shipped profile of that
    name (``[profiles.cpu] base = "cpu"`` extends the example)."""
    table = dict(data[name]) if name in data else None
    src_path = path
    if table is None:
        table = _builtin_table(name)
        src_path = os.path.join(BUILTIN_DIR, f"{name}.toml")
    base = table.get("base")
    if base is None:
        return table
    key = f"{prefix}.{name}.base"
    if not isinstance(base, str):
        raise ConfigError(f"expected a profile name, got {base!r}", path=src_path, key=key)
    in_file = base in data and base != name
    here = f"{'file' if name in data else 'shipped'}:{name}"
    there = f"{'file' if in_file else 'shipped'}:{base}"
    if there in seen or there == here:
        chain = " -> ".join(s.partition(":")[2] for s in (*seen, here, there))
        raise ConfigError(f"base chain loops: {chain}", path=src_path, key=key)
    if not in_file and base not in builtin_names():
        known = ", ".join(sorted(set(data) | set(builtin_names())))
        raise ConfigError(f"no such profile {base!r} (known: {known})", path=src_path, key=key)
    parent = _resolve_base(base, data if in_file else {}, path, prefix, (*seen, here))
    merged = {**parent, **table}
    for sub in ("ib", "extra"):
        if isinstance(parent.get(sub), Mapping) and isinstance(table.get(sub), Mapping):
            merged[sub] = {**parent[sub], **table[sub]}
    if "nodes" not in table:
        # A node selector belongs to one profile: inheriting it would make
        # parent and child match the same nodes.
        merged.pop("nodes", None)
    merged["base"] = base
    return merged


def builtin_names() -> list[str]:
    try:
        return sorted(f[:-5] for f in os.listdir(BUILTIN_DIR) if f.endswith(".toml"))
    except FileNotFoundError:
        return []


def _builtin_table(name: str) -> dict[str, Any]:
    path = os.path.join(BUILTIN_DIR, f"{name}.toml")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError("no such shipped profile", path=path, key=f"profiles.{name}") from exc
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=path) from exc
    table = data.get("profiles", {}).get(name)
    if not isinstance(table, Mapping):
        raise ConfigError("file has no such table", path=path, key=f"profiles.{name}")
    return dict(table)


def load_builtin(name: str) -> Profile:
    """A shipped example profile by name (``h100-sxm5-80gb`` ...)."""
    path = os.path.join(BUILTIN_DIR, f"{name}.toml")
    table = _resolve_base(name, {}, path, "profiles", ())
    prof = from_mapping(Profile, table, path=path, prefix=f"profiles.{name}")
    return replace(prof, name=name)


def load_profiles(cfg: Config) -> Profiles:
    """The config's ``[profiles]`` section, validated (works with or without
    the section registered in ``config.SECTIONS``)."""
    return Profiles.from_section(cfg.data.get("profiles", {}), path=cfg.path, prefix="profiles")


def as_profile(value: Profile | Mapping[str, Any] | None) -> Profile:
    """``CheckContext.profile`` as a typed Profile (tests and other callers
    may pass a plain mapping)."""
    if isinstance(value, Profile):
        return value
    if not value:
        return EMPTY
    data = dict(value)
    return from_mapping(Profile, data, path=None, prefix="profile")
