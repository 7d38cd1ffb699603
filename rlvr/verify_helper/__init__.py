"""The verifier helper process (`python -m rlvr.verify_helper`), see `rlvr.verify.timeout`;
this module holds its wire format, `__main__` its request loop.

Outside the `rlvr.verify` package so that running it imports nothing but this package.

Reads length-prefixed pickled ``(fn, args)`` requests on stdin and answers each with a
length-prefixed pickled ``("ok", value)`` or ``("error", exception)`` on stdout. Started
with ``subprocess`` rather than ``multiprocessing`` so the parent's ``__main__`` (a user's
training script) is never re-imported in the helper.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any, BinaryIO

HEADER = struct.Struct("!Q")


def read_message(stream: BinaryIO) -> Any:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        raise EOFError
    (size,) = HEADER.unpack(header)
    payload = stream.read(size)
    if len(payload) < size:
        raise EOFError
    return pickle.loads(payload)


def write_message(stream: BinaryIO, value: Any) -> None:
    payload = pickle.dumps(value)
    stream.write(HEADER.pack(len(payload)) + payload)
    stream.flush()
