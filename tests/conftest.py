"""Suite-wide settings: one torch thread per test worker, so two xdist workers on two
cores do not oversubscribe them (which slows torch down by an order of magnitude)."""

import os

import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
