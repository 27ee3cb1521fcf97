"""Make sure harness-started processes do not outlive the process that started them.

Two mechanisms, because neither covers every way a test run ends:

* At interpreter exit (``atexit``) every tracked process still alive is killed and
  waited for.
* A test process that is SIGKILLed, or SIGTERMed by a CI runner's timeout (Python's
  default for SIGTERM skips ``atexit``), runs no code of its own any more. For that, the
  first tracked process also starts a **watchdog**: a small Python process in a session
  of its own that reads "+pid" / "-pid" lines from a pipe. The write end lives only in
  this process, so the pipe reaches end-of-file when this process is gone however it
  ended; the watchdog then SIGKILLs the process group of every pid still listed (the
  harness starts each server in a session of its own: its pid is its group) and exits.

The watchdog is started without ``preexec_fn`` (Python uses ``vfork`` then), so no
``fork()`` handler of grpcio runs in the child (grpc/grpc#43055). No thread is started.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import sys
import threading
import weakref
from typing import IO, Protocol

__all__ = ["Killable", "track", "untrack", "watchdog_pid"]

#: The watchdog: list the groups to kill, kill them at end-of-file (or SIGTERM), exit.
#: SIGINT is ignored: a Ctrl-C goes to the terminal's foreground group, and the test
#: process handles it by stopping its servers itself.
_WATCHDOG = """
import os, signal, sys
groups = set()
def kill_all(*_):
    for pid in groups:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(0)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, kill_all)
for line in sys.stdin.buffer:
    try:
        pid = int(line[1:])
    except ValueError:
        continue
    if line[:1] == b"+":
        groups.add(pid)
    else:
        groups.discard(pid)
kill_all()
"""


class Killable(Protocol):
    """Something that can SIGKILL its own process."""

    def kill(self) -> object:
        """Kill the process and wait for it."""
        ...


#: Tracked objects and the pid each was tracked with.
_live: weakref.WeakKeyDictionary[Killable, int] = weakref.WeakKeyDictionary()
#: Guards ``_live`` and the watchdog's pipe.
_lock = threading.Lock()
_watchdog: subprocess.Popen[bytes] | None = None
#: The process that started ``_watchdog``: a forked child has no watchdog of its own.
_watchdog_owner = 0


def track(obj: Killable, pid: int) -> None:
    """Kill ``obj`` (whose process group is ``pid``) at interpreter exit, or have the
    watchdog kill the group if this process dies first, unless :func:`untrack` is called
    first."""
    with _lock:
        _live[obj] = pid
        _tell(b"+%d\n" % pid)


def untrack(obj: Killable) -> None:
    """Forget ``obj`` (its process has ended)."""
    with _lock:
        pid = _live.pop(obj, None)
        if pid is not None:
            _tell(b"-%d\n" % pid)


def watchdog_pid() -> int | None:
    """The pid of this process's watchdog, if one runs (for tests of the harness)."""
    with _lock:
        watchdog = _own_watchdog()
        return None if watchdog is None else watchdog.pid


def _tell(line: bytes) -> None:
    """Under ``_lock``: send ``line`` to the watchdog, starting one if none runs (or the
    one there was is gone: every tracked pid is listed again)."""
    global _watchdog, _watchdog_owner
    stdin = _pipe()
    if stdin is not None:
        with contextlib.suppress(OSError):
            stdin.write(line)
            stdin.flush()
            return
    if line.startswith(b"-"):
        return  # a new watchdog starts with the groups still tracked
    _watchdog = subprocess.Popen(
        [sys.executable, "-S", "-c", _WATCHDOG],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # not killed with the test process's group
    )
    _watchdog_owner = os.getpid()
    stdin = _pipe()
    assert stdin is not None
    with contextlib.suppress(OSError):
        stdin.write(b"".join(b"+%d\n" % pid for pid in _live.values()))
        stdin.flush()


def _own_watchdog() -> subprocess.Popen[bytes] | None:
    """Under ``_lock``: the watchdog this process started, if any (a forked child has
    none of its own: the one it inherited is its parent's)."""
    return _watchdog if _watchdog_owner == os.getpid() else None


def _pipe() -> IO[bytes] | None:
    """Under ``_lock``: this process's watchdog pipe, if its watchdog still runs."""
    watchdog = _own_watchdog()
    if watchdog is None or watchdog.poll() is not None:
        return None
    return watchdog.stdin


def _kill_leftovers() -> None:
    global _watchdog
    with _lock:
        leftovers = list(_live)
    for obj in leftovers:
        obj.kill()
    with _lock:
        watchdog, _watchdog = _own_watchdog(), None
        if watchdog is None:
            return
    # End-of-file with nothing listed: it exits; waited for, so no ResourceWarning.
    with contextlib.suppress(OSError):
        assert watchdog.stdin is not None
        watchdog.stdin.close()
    try:
        watchdog.wait(5.0)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


atexit.register(_kill_leftovers)
