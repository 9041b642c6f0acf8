"""The runtime every Hylo service shares: settings, bus and store wiring, HTTP health and metrics,
graceful shutdown.

Why one runtime: the featurizer, prioritizer and placer differ only in what they do with a message
(``services/<name>/service.py`` declares routes: input kind -> handler -> output message). How they
connect, acknowledge, dead-letter, expose ``/healthz``, ``/readyz`` and ``/metrics``, and stop without
losing a message is the same for all of them, so it lives here once.
"""

from shared.service.definition import Route, ServiceContext, ServiceDefinition, Wiring
from shared.service.runtime import ServiceRuntime, run_service
from shared.service.settings import ServiceSettings

__all__ = [
    "Route",
    "ServiceContext",
    "ServiceDefinition",
    "ServiceRuntime",
    "ServiceSettings",
    "Wiring",
    "run_service",
]
