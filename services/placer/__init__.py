"""Hylo placer service (built in its own issue)."""
