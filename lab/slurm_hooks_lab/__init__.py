"""The slurm-hooks lab: a real Slurm on one machine, the demo, and the test doubles.

Never imported by the product (an import-linter contract says so). The fakes
plug into the product through its named registries (``nvml = "lab:fake"``),
the same way real backends do.
"""
