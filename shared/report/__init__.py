"""``hylo report``: one self-contained HTML page about a cluster, made from the decisions database.

Why one file with everything inside: the report is mailed, attached to an incident or a model
promotion, and opened offline; its figures are PNG data URIs and its page loads nothing. The same page
is served by the query API (``GET /v1/report``) and written by the CLI (``hylo report``).

``load_report_data`` reads the store (async SQLAlchemy), ``render_report`` draws the figures and
assembles the escaped page, ``generate_report`` does both. ``docs/report.md`` describes the page.
"""

from shared.report.build import generate_report, render_report
from shared.report.data import NotMigrated, ReportData, ReportError, UnknownCluster, load_report_data

__all__ = [
    "NotMigrated",
    "ReportData",
    "ReportError",
    "UnknownCluster",
    "generate_report",
    "load_report_data",
    "render_report",
]
