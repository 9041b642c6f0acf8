"""Hylo's Slurm adapter: squeue/sinfo/sacct -> snapshots and outcomes; decisions -> scontrol."""
