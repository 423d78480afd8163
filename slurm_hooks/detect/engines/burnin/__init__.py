"""GPU burn-in: a short stress on every GPU with a correctness check.

Gather and judge are split as everywhere else: engines (``gpu_burn`` binary,
PyTorch, the fake used by tests and the lab) each produce a
:class:`~slurm_hooks.detect.engines.burnin.model.BurninRun`; :func:`~slurm_hooks.detect.engines.burnin.judge.judge_burnin`
turns one into findings without touching the machine.  Nothing here imports
torch or NVML at module import time: the prolog must start fast.
"""
