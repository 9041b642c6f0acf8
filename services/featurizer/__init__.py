"""Hylo featurizer service (built in its own issue)."""
