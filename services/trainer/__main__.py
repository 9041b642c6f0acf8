"""`python -m services.trainer`: run the trainer (settings from HYLO_* env vars and hylo.toml)."""

import sys

from services.trainer.service import DEFINITION
from shared.service import run_service

sys.exit(run_service(DEFINITION))
