"""The verifier helper process (`python -m rlvr.verify_helper`), see `rlvr.verify.timeout`.

Outside the `rlvr.verify` package so that running it imports nothing but this module.

Reads length-prefixed pickled ``(fn, args)`` requests on stdin and answers each with a
length-prefixed pickled ``("ok", value)`` or ``("error", exception)`` on stdout. Started
with ``subprocess`` rather than ``multiprocessing`` so the parent's ``__main__`` (a user's
training script) is never re-imported in the helper.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
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


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    while True:
        try:
            fn, args = read_message(requests)
        except EOFError:  # the parent closed the pipe or exited
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as error:
            reply = ("error", error)
        try:
            write_message(replies, reply)
        except Exception as error:  # an unpicklable result or exception
            write_message(replies, ("error", TypeError(f"verifier reply not picklable: {error}")))


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # Replies get a private copy of stdout; anything a verifier prints (Python or C level)
    # goes to stderr instead of corrupting the protocol.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
