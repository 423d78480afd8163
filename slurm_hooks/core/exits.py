"""The hooks' exit statuses that mean something to the shims.

Here, below every hook, so that the prolog (which returns it) and the hook
entry point (which passes it on) name it without importing each other.
"""

from __future__ import annotations

#: Exit status meaning "slurm-hooks drained this node; the job must not start
#: here".  The prolog shim turns it into Slurm's failure status (1); any other
#: non-zero status is slurm-hooks itself failing (not installed, crashed) and
#: the shim lets the job run: our own bug must never drain the fleet.
EXIT_REJECT = 3

__all__ = ["EXIT_REJECT"]
