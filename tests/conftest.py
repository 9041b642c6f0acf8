"""Settings every test process shares, whatever ``-n`` runs it.

pytest-xdist starts its workers with ``COLUMNS=80`` in their environment, and Hylo's console fixes
its width when ``shared.cli`` is first imported (the terminal's, ``COLUMNS`` if set, else 1,000
when piped: ``shared.cli.common``). In a worker every table was therefore folded at 80 columns, and
a test that read a word out of a table passed alone and failed in the suite. The workers drop that
``COLUMNS`` so that they see what a single-process run sees; a test that wants a width sets it
itself (``tests/cli/test_cli_basics.py``).
"""

from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
