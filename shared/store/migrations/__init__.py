"""Alembic migrations of the Hylo store (a package so that it ships with Hylo)."""
