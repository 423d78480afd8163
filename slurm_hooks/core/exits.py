"""The exit statuses of our commands and hooks.

Here, below every hook and command, so that the prolog (which returns
EXIT_REJECT) and the hook entry point (which passes it on) name it without
importing each other, and every command says healthy, unhealthy and could
not judge with the same numbers.
"""

from __future__ import annotations

#: Healthy (or done); unhealthy (a WARN or FAIL finding); could not judge
#: (bad input, unreachable Slurm): what scripts and NHC-style callers test.
EXIT_OK, EXIT_UNHEALTHY, EXIT_ERROR = 0, 1, 2

#: Exit status meaning "slurm-hooks drained this node; the job must not start
#: here".  The prolog shim turns it into Slurm's failure status (1); any other
#: non-zero status is slurm-hooks itself failing (not installed, crashed) and
#: the shim lets the job run: our own bug must never drain the fleet.
EXIT_REJECT = 3

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_REJECT", "EXIT_UNHEALTHY"]
