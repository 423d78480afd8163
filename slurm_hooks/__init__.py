"""slurm-hooks: self-healing for GPU clusters run by Slurm."""

__version__ = "0.1.0"
