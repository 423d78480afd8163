"""Training progress: records the job writes (``slurm_hooks.jobside.progress``),
gathered with /proc (``gather``) and judged without I/O (``judge``): hangs
and stragglers.  NCCL RAS and flight-recorder parsers add evidence."""
