"""Slurm access layer: one interface (``base.SlurmClient``), several backends."""
