"""`python -m services.adapter_slurm`: run one adapter (settings from HYLO_* env vars and hylo.toml)."""

import sys

from services.adapter_slurm.service import DEFINITION
from shared.service import run_service

sys.exit(run_service(DEFINITION))
