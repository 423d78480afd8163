"""Small Kubernetes API client and the Slurm -> Kubernetes bridge."""
