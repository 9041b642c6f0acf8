"""`python -m services.prioritizer`: run one replica (settings from HYLO_* env vars and hylo.toml)."""

import sys

from services.prioritizer.service import DEFINITION
from shared.service import run_service

sys.exit(run_service(DEFINITION))
