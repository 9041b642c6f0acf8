"""Hylo adapter_slurm service (built in its own issue)."""
