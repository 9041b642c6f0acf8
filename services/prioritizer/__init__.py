"""Hylo prioritizer service (built in its own issue)."""
