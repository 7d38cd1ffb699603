"""The helper's request loop: `python -m rlvr.verify_helper` (imports nothing but this
package, whose `__init__` holds only the wire format)."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, BinaryIO

from rlvr.verify_helper import read_message, write_message


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
