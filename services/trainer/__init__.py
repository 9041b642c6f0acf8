"""Hylo trainer service (built in its own issue)."""
