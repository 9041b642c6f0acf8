"""Hylo trainer service: retraining from recorded outcomes, imitation warm start, gated promotion.

``python -m services.trainer`` or ``hylo serve trainer``; ``docs/trainer.md`` describes it.
"""
