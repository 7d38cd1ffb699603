"""`rlvr audit`: the loss, advantages and d loss / d log-prob of every token of a JSON batch
(`batch.py`), and its readable table (`table.py`)."""

from rlvr.audit.batch import AuditBatch, AuditInputError, load_batch_json, parse_batch, run_audit
from rlvr.audit.table import format_audit

__all__ = [
    "AuditBatch",
    "AuditInputError",
    "format_audit",
    "load_batch_json",
    "parse_batch",
    "run_audit",
]
