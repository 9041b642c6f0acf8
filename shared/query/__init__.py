"""The read-only query API over the store (``python -m shared.query``, port 8100; docs/query-api.md)."""

from shared.query.app import create_app
from shared.query.settings import QuerySettings

__all__ = ["QuerySettings", "create_app"]
