"""Settings of the query API process (``HYLO_*`` env vars over ``hylo.toml``).

Why page limits are settings: a page of decisions carries every job's feature map, so the largest page
a client may ask for is a memory and latency budget the operator chooses, not a constant. The report
reads a whole time range and draws figures (seconds of CPU, hundreds of MB on a large store), so how
many may be in progress and how long one may take are budgets too. Who may ask, and how often, is
``shared.service.api_auth.ApiSecuritySettings`` (``HYLO_API_*``), shared with the trainer.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from shared.config import HyloBaseSettings

DEFAULT_PORT = 8100


class QuerySettings(HyloBaseSettings):
    """Where the query API listens and how much one response may hold."""

    http_host: str = Field(default="127.0.0.1", description="HTTP bind address (0.0.0.0 in containers)")
    http_port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="HTTP port")
    query_page_default: int = Field(default=100, ge=1, description="decisions per page when none is asked")
    query_page_max: int = Field(default=1000, ge=1, description="largest page of decisions a client may ask")
    query_history_max: int = Field(
        default=10_000, ge=1, description="most decisions returned in one job's history"
    )
    query_list_max: int = Field(
        default=1000, ge=1, description="most clusters or model versions in one page (also the default)"
    )
    report_timeout_s: float = Field(
        default=30.0, gt=0, description="time one /v1/report may take, waiting included (then 504)"
    )
    report_max_concurrent: int = Field(
        default=4, ge=1, description="/v1/report requests in progress at once; more get 503 at once"
    )
    ready_timeout_s: float = Field(default=1.0, gt=0, description="time /readyz allows the database")
    log_level: str = Field(default="INFO", description="Python logging level")

    @model_validator(mode="after")
    def _default_within_max(self) -> QuerySettings:
        if self.query_page_default > self.query_page_max:
            default, most = self.query_page_default, self.query_page_max
            raise ValueError(f"query_page_default ({default}) exceeds query_page_max ({most})")
        return self
