"""The PyTRIO actor's event queue: events run one at a time, in the order they were
accepted (the SDK posts them in order and may queue an optimizer step right behind a
forward_backward without waiting), on one worker thread. A POST returns at once
("accepted"); the result is long-polled, so a step longer than the SDK's 30 s submit
timeout is never cut off.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.service.pytrio.wire import Envelope, WireError, event_response

KEEP = 4096  # finished events kept for polling, oldest dropped first
MAX_WAIT = 20.0  # seconds a poll waits, under the SDK's 65 s poll timeout


@dataclass
class Event:
    envelope: Envelope
    status: str = "accepted"
    result: dict | None = None
    error: tuple[str, str] | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def body(self) -> dict:
        return event_response(self.envelope, self.status, self.result, self.error)


class EventQueue:
    """FIFO execution of `execute(envelope) -> result`; a `WireError` or `ValueError` is the
    event's one-line failure, any other exception too (with its type), and the worker
    goes on with the next event."""

    def __init__(self, execute: Callable[[Envelope], dict], log: Callable[[str], None]) -> None:
        self.execute, self.log = execute, log
        self.events: OrderedDict[str, Event] = OrderedDict()
        self.lock = threading.Lock()
        self.pending: queue.Queue[Event | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, name="pytrio-events", daemon=True)
        self.worker.start()

    def submit(self, envelope: Envelope) -> Event | None:
        """The accepted event, or None if an event of that id exists (the SDK's resubmit)."""
        with self.lock:
            if envelope.event_id in self.events:
                return None
            event = self.events[envelope.event_id] = Event(envelope)
            while len(self.events) > KEEP:
                self.events.popitem(last=False)
        self.pending.put(event)
        return event

    def get(self, event_id: str, wait: float) -> Event | None:
        with self.lock:
            event = self.events.get(event_id)
        if event is not None:
            event.done.wait(min(max(wait, 0.0), MAX_WAIT))
        return event

    def close(self) -> None:
        self.pending.put(None)

    def _work(self) -> None:
        while (event := self.pending.get()) is not None:
            event.status = "running"
            try:
                event.result = self.execute(event.envelope)
                event.status = "succeeded"
            except WireError as err:
                event.error, event.status = (err.code, str(err)), "failed"
            except ValueError as err:
                event.error, event.status = ("invalid_request", str(err)), "failed"
            except Exception as err:  # the event fails; the server goes on
                self.log(traceback.format_exc())
                message = f"{type(err).__name__}: {err}"
                event.error, event.status = ("internal", message), "failed"
            if event.error:
                self.log(f"{event.envelope.type} failed: {event.error[1]}")
            event.done.set()
