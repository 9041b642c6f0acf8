"""The model tests run on one thread: the machine's cores are shared."""

from __future__ import annotations

import torch

torch.set_num_threads(1)
