"""The Slurm -> Kubernetes bridge: pure planners (faults, lending) beside their executors."""
