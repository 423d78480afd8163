"""What ``xid explain`` says slurm-hooks does and what a human must do.

The catalogue's bucket actions (``reboot``, ``reset_gpu``, ...) are NVIDIA's
recovery advice.  What slurm-hooks performs depends on the config: by
default (``[repair] enabled = false``) it only takes a node out of service
(drain with its reason, signal the jobs, requeue them after the grace) or
leaves it alone, and the repair is a human's job, followed by acceptance.
With ``[repair] enabled`` (act/repair.py) it also carries out the repair
once the node is empty: GPU reset, reboot by Slurm, or a hardware ticket,
then acceptance and the resume, climbing reset -> reboot -> replace when the
fault returns.  Observe-only does none of it.  One place says this so
``xid explain`` never promises what the config does not do.
"""

from __future__ import annotations

from slurm_hooks.cli._width import WIDTH, fill
from slurm_hooks.core.model import Action, Status
from slurm_hooks.decide.repair import RepairConfig
from slurm_hooks.detect.xid.catalogue import Bucket

EVACUATE = (
    "drains the node with its reason (slurm-hooks/1 {code} gpu<i> ...), sends the jobs "
    "there SIGUSR1 (batch shell) and SIGTERM (steps) to checkpoint, and requeues them "
    "when they exit or the grace ends"
)
AFTER = "then `slurm-hooks acceptance NODE --run-local`, which resumes the node when it passes"

_HUMAN = {
    Action.REBOOT: "reboot the node (only a reboot brings the GPU back); " + AFTER,
    Action.RESET_GPU: (
        "reset the GPU once no process uses it (`nvidia-smi -r -i GPU`) or reboot the node; "
        + AFTER
    ),
    Action.REPLACE: "replace the hardware or contact the vendor (RMA); " + AFTER,
}


_REPAIR = {
    Action.RESET_GPU: "resets the GPU (`nvidia-smi -r -i GPU`, only when no process holds it)",
    Action.REBOOT: "asks Slurm to reboot the node (`scontrol reboot ASAP nextstate=DOWN`, at "
    "most [repair] max_concurrent_reboots per partition at once)",
    Action.REPLACE: "opens a hardware ticket (webhook, once) and keeps the node drained as REPLACE",
}


def we_do(
    bucket: Bucket,
    code: str = "XID<n>",
    repair: RepairConfig | None = None,
    *,
    observe_only: bool = False,
) -> str:
    """What slurm-hooks does for an XID in this bucket (before repeat rules),
    with this ``[repair]`` config (default: off)."""
    if bucket.status is Status.FAIL:
        extra = (
            "; also requests a replacement node (bridge)" if bucket.action is Action.REPLACE else ""
        )
        text = EVACUATE.format(code=code) + extra
        if observe_only:
            return text + " (observe-only: decided and audited, nothing touched)."
        if repair is None or not repair.enabled:
            return (
                text
                + ". With [repair] off (the default) it never reboots or resets anything itself."
            )
        how = _REPAIR.get(bucket.action)
        if how is None:
            return text + "; the repair is left to a human (no automatic repair for this action)."
        days = repair.window_s / 86400
        tail = (
            "" if bucket.action is Action.REPLACE
            else ", then runs acceptance there and resumes the node only if it passes"
        )  # fmt: skip
        return (
            f"{text}; once the node is empty it {how}{tail}. The same fault on the same GPU "
            f"within {days:g} days climbs reset -> reboot -> replace."
        )
    if bucket.action is Action.IGNORE or bucket.status is Status.OK:
        return "nothing (the event is logged)."
    why = " (an application error)" if bucket.action is Action.RESTART_APP else ""
    return f"nothing to the node or the job: the event is reported and audited{why}."


def human_does(bucket: Bucket) -> str:
    """What a person must do before the node can return to service."""
    if bucket.status is not Status.FAIL:
        if bucket.action is Action.RESTART_APP:
            return "nothing on the node; the job's owner restarts the application."
        return "nothing."
    if bucket.action in _HUMAN:
        return _HUMAN[bucket.action] + "."
    return f"{bucket.meaning.rstrip('.')}; {AFTER}."


def field(label: str, text: str, *, wide: bool, width: int = WIDTH) -> str:
    """One ``  label: text`` line, wrapped to ``width`` unless ``wide``;
    no label: an indented paragraph."""
    head = f"  {label + ':':<21}" if label else "    "
    return fill(text, wide=wide, width=width, indent=head, subsequent=" " * len(head))


def repair_settings() -> tuple[RepairConfig | None, bool]:
    """``[repair]`` and observe-only from the config in use; (None, False)
    when it cannot be read (``xid explain`` then tells the default)."""
    from slurm_hooks.core import config as config_mod
    from slurm_hooks.core.errors import ConfigError
    from slurm_hooks.decide.config import PolicyConfig

    try:
        cfg = config_mod.load(validate=False)
        policy = cfg.section("policy", PolicyConfig)
        return cfg.section("repair", RepairConfig), cfg.general.observe_only or policy.observe_only
    except (ConfigError, OSError):
        return None, False
