"""A real Slurm (Debian's slurmctld, slurmd and munge) beside the simulated Kubernetes cluster."""
