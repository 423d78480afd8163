"""What a training job imports: standard library only, never the rest of slurm_hooks."""
