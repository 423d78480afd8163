"""What ``xid explain`` says slurm-hooks does and what a human must do.

The catalogue's bucket actions (``reboot``, ``reset_gpu``, ...) are NVIDIA's
recovery advice, not what this tool performs: slurm-hooks itself only ever
takes a node out of service (drain with its reason, signal the jobs, requeue
them after the grace) or leaves it alone.  The repair is a human's (or a
site's repair automation's) job, followed by acceptance, which resumes the
node.  One place says this so ``xid explain`` never promises a reboot.
"""

from __future__ import annotations

from slurm_hooks.cli._width import WIDTH, fill
from slurm_hooks.core.model import Action, Status
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


def we_do(bucket: Bucket, code: str = "XID<n>") -> str:
    """What slurm-hooks does for an XID in this bucket (before repeat rules)."""
    if bucket.status is Status.FAIL:
        extra = (
            "; also requests a replacement node (bridge)" if bucket.action is Action.REPLACE else ""
        )
        return EVACUATE.format(code=code) + extra + ". It never reboots or resets anything itself."
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
