"""Calling a student's function with a time limit, inside a live Jupyter kernel.

The obvious tools each break something here:

- `signal.alarm` raises in the main thread between Python bytecodes. It cannot stop a call
  that is stuck in C: a JAX program with an endless `lax.while_loop` runs inside XLA and
  never returns to the interpreter, so the alarm never fires and the kernel hangs. It also
  works only in the main thread and not at all on Windows.
- A subprocess can be killed, but a function defined in a notebook cannot be sent to one
  without extra dependencies, forking a process that runs JAX deadlocks, and starting a
  fresh Python with JAX costs seconds per call.

So the call runs in a *worker thread* while the kernel's own thread waits at most `seconds`.
Whatever the student's code does, the kernel gets control back on time:

- a Python loop (`while True: ...`) is stopped by raising `TimeLimitExceeded` inside the
  worker (`PyThreadState_SetAsyncExc`, the thread counterpart of a signal). It derives from
  BaseException, so `except Exception:` in the student's code does not swallow it; the
  request is repeated for a moment in case a bare `except:` does.
- a call stuck in C (an endless XLA loop) cannot be stopped by anything short of ending the
  process. The thread is abandoned — it keeps running in the background — and the outcome
  says so, so the feedback can suggest restarting the runtime. The kernel stays usable:
  XLA runs other programs beside the stuck one.

An exception, `sys.exit()` or a wrong return value inside the call is captured in the
`Outcome`; nothing the function does propagates into the caller, except the user pressing
"interrupt" (KeyboardInterrupt in the waiting thread), which stops the worker and goes on up.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["TimeLimitExceeded", "Outcome", "call_with_time_limit"]

# How long to keep asking a timed-out Python loop to stop before abandoning it.
STOP_GRACE_S = 1.0


class TimeLimitExceeded(BaseException):
    """Raised inside a call that ran past its time limit (BaseException: hard to swallow)."""


@dataclass
class Outcome:
    """What happened to one call."""

    value: Any = None
    error: BaseException | None = None   # what the call raised (SystemExit included)
    timed_out: bool = False
    abandoned: bool = False              # timed out and still running in the background
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


class _Box:
    """Where the worker leaves its result; `finished` is set the moment the call is over."""

    def __init__(self) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.timed_out = False
        self.finished = False


def _settle() -> None:
    """A function call: a stop request that arrived as the call finished is delivered here."""


def _ask_to_stop(thread: threading.Thread) -> None:
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                   ctypes.py_object(TimeLimitExceeded))
    except (AttributeError, TypeError):   # not CPython: the thread will be abandoned
        pass


def call_with_time_limit(fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None,
                         seconds: float = 10.0) -> Outcome:
    """Run ``fn(*args, **kwargs)`` for at most `seconds`; never raises (but see module doc)."""
    kwargs = kwargs or {}
    box = _Box()

    def work() -> None:
        try:
            try:
                box.value = fn(*args, **kwargs)
            except TimeLimitExceeded:
                box.timed_out = True
            except BaseException as err:  # noqa: BLE001 - SystemExit too: it is the student's
                box.error = err
            finally:
                box.finished = True
            _settle()
        except TimeLimitExceeded:
            pass

    thread = threading.Thread(target=work, name="inferbook-grading-call", daemon=True)
    start = time.monotonic()
    thread.start()
    try:
        thread.join(seconds)
    except KeyboardInterrupt:
        _stop(thread, box)
        raise
    elapsed = time.monotonic() - start
    if box.finished and not box.timed_out:
        thread.join()
        return Outcome(value=box.value, error=box.error, seconds=elapsed)
    stopped = _stop(thread, box)
    return Outcome(timed_out=True, abandoned=not stopped, seconds=elapsed)


def _stop(thread: threading.Thread, box: _Box) -> bool:
    """Ask the worker to stop until it does or the grace period ends; True if it stopped."""
    end = time.monotonic() + STOP_GRACE_S
    while thread.is_alive() and time.monotonic() < end:
        if not box.finished:
            _ask_to_stop(thread)
        thread.join(0.05)
    return not thread.is_alive()
