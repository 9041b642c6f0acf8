"""`python -m services.placer`: run one replica (settings from HYLO_* env vars and hylo.toml)."""

import sys

from services.placer.service import DEFINITION
from shared.service import run_service

sys.exit(run_service(DEFINITION))
