"""One thread at a time inside an object that holds state (a Simulator, a planner, a Tape).

The kernels run without the GIL, so two threads may step two batches at once. Two threads in
the same stateful object would race on its arrays; instead, the second one gets a clear error.
"""

from __future__ import annotations

import contextlib
import functools
import threading


@contextlib.contextmanager
def exclusive_use(obj, what: str):
    """hold obj for this thread; RuntimeError if another thread holds it (re-entrant). An
    object without attributes of its own (the extension's classes used bare) is not held."""
    attributes = getattr(obj, "__dict__", None)
    if attributes is None:
        yield obj
        return
    lock = attributes.get("_phx_lock") or attributes.setdefault("_phx_lock", threading.RLock())
    if not lock.acquire(blocking=False):
        raise RuntimeError(f"{what} is in use by another thread: it is not thread-safe; give "
                           f"each thread its own (models may be shared)")
    try:
        yield obj
    finally:
        lock.release()


def exclusive(what: str):
    """a method decorator: the call holds self (exclusive_use)"""
    def wrap(method):
        @functools.wraps(method)
        def run(self, *args, **kwargs):
            with exclusive_use(self, what):
                return method(self, *args, **kwargs)
        return run
    return wrap
