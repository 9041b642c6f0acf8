"""The ``hylo`` command line (Typer)."""
