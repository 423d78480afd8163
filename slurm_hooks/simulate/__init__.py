"""``slurm-hooks simulate``: what the product is worth on a real fleet.

A discrete-event replay of a failure trace (generated from published rates
and cause mixes, or read from a site's own audit log) over simulated nodes
and training jobs.  Each failure is turned into the evidence a node would
show (a kernel-log XID line, an NVML error, a progress stall, a link down)
and goes through the product's own judges, ``decide()``, the breaker, the
repair ladder, spare selection and flapping rules, on simulated time.  Only
Slurm and the hardware are simulated; every write slurm-hooks makes goes
through the real ``SlurmDoor`` over an in-memory Slurm (``cluster.py``).

Modules: ``params`` (knobs and their published defaults), ``trace``
(published profiles, the generator, a site's history), ``evidence`` (cause
-> findings through the real judges), ``cluster`` (the simulated Slurm),
``replay`` (the event loop and the three baselines), ``report`` (figures,
table, JSON, picture).

Beside it, the false-alarm replay of hang detection (issue #30):
``workload`` (healthy training jobs as their progress records show them)
and ``hang_replay`` (those jobs, and hung ones, through the hang and
straggler judges and the policy: false alarms per 10,000 job-hours and
seconds to a verdict; ``bench/bench_hang_replay.py``).
"""
