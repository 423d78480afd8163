"""Whether the kernel log the XID check reads can be written by users.

Only the kernel writes ``/dev/kmsg`` (``source = "kmsg"``, what ``auto``
picks on a node where it is readable) and the journal's kernel transport
(``source = "journal"``).  A syslog file (``source = "file"``, or ``auto``
with a ``path``) holds whatever the syslog daemon was handed: a user's
``logger -t kernel "NVRM: Xid ..."`` line carries the tag ``kernel`` like
the kernel's own, and no reader of the file can tell them apart
(docs/security.md).  Silent on the nodes, so ``slurm-hooks install
--check`` says it.
"""

from __future__ import annotations

from typing import Any


def advice(cfg: Any = None) -> list[str]:
    """What to know about ``[checks.xid]`` of ``cfg`` (a Config, a path, or
    None for the hooks' config); empty when the check reads what only the
    kernel writes, is off, or the config cannot be read (install reports
    that on its own)."""
    from slurm_hooks.cli.slurm_settings import hooks_config
    from slurm_hooks.core.errors import SlurmHooksError
    from slurm_hooks.detect.checks.settings import ChecksConfig
    from slurm_hooks.detect.xid.settings import XidSettings

    try:
        table = hooks_config(cfg).section("checks", ChecksConfig).tables.get("xid") or {}
        settings = XidSettings.from_mapping(table)
    except SlurmHooksError:
        return []
    if not settings.enabled or settings.resolved_source() != "file":
        return []
    return [
        f"[checks.xid] reads XIDs from the file {settings.path}: a line any user writes "
        "with `logger -t kernel` passes there for the kernel's, and drains the node, "
        'unless only the kernel feeds that file (rsyslog: if $inputname == "imklog"). '
        'source = "kmsg" reads what the kernel alone writes.'
    ]
