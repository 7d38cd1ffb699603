"""Loading with transformers' per-shard progress bars hidden (callers show their own)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from transformers.utils import logging as hf_logging


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Hide transformers' per-shard progress bars; callers show their own."""
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
