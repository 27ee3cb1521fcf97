"""Make sure harness-started processes do not outlive the process that started them.

Two mechanisms, because neither covers every way a test run ends:

* At interpreter exit (``atexit``) every tracked process still alive is killed and
  waited for.
* A test process that is SIGKILLed, or SIGTERMed by a CI runner's timeout (Python's
  default for SIGTERM skips ``atexit``), runs no code of its own any more. For that, the
  first tracked process also starts a **watchdog**: a small Python process in a session
  of its own that reads "+pid" / "-pid" lines from a pipe. The write end lives only in
  this process (it is not inherited across ``exec``, and a forked child closes its
  copy at once), so the pipe reaches end-of-file when this process is gone however it
  ended, even while a child it forked runs on; the watchdog then SIGKILLs the process
  group of every pid still listed (the harness starts each server in a session of its
  own: its pid is its group) and exits.

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
from typing import Protocol

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
#: The write end of the watchdog's pipe, a bare descriptor: a buffered file's lock might
#: be held by another thread at a ``fork()``, and the child must close its copy.
_pipe_fd = -1
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
    global _watchdog, _watchdog_owner, _pipe_fd
    fd = _pipe()
    if fd >= 0:
        with contextlib.suppress(OSError):
            _write_all(fd, line)
            return
    if line.startswith(b"-"):
        return  # a new watchdog starts with the groups still tracked
    _close_pipe()
    read_end, write_end = os.pipe()  # neither is inherited by exec'd programs
    try:
        _watchdog = subprocess.Popen(
            [sys.executable, "-S", "-c", _WATCHDOG],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not killed with the test process's group
        )
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    _pipe_fd, _watchdog_owner = write_end, os.getpid()
    with contextlib.suppress(OSError):
        _write_all(write_end, b"".join(b"+%d\n" % pid for pid in _live.values()))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _own_watchdog() -> subprocess.Popen[bytes] | None:
    """Under ``_lock``: the watchdog this process started, if any (a forked child has
    none of its own: the one it inherited is its parent's)."""
    return _watchdog if _watchdog_owner == os.getpid() else None


def _pipe() -> int:
    """Under ``_lock``: this process's watchdog pipe, if its watchdog still runs (else -1)."""
    watchdog = _own_watchdog()
    if watchdog is None or watchdog.poll() is not None:
        return -1
    return _pipe_fd


def _close_pipe() -> None:
    """Under ``_lock`` (or alone in a new child): close this process's write end."""
    global _pipe_fd
    fd, _pipe_fd = _pipe_fd, -1
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _forget_in_child() -> None:
    """After ``fork()``, in the child: it must not keep its parent's watchdog waiting,
    nor kill its parent's servers when it exits.

    Runs before any other thread exists in the child, so without ``_lock``, which
    another thread of the parent may have held at the fork: the child gets a new one."""
    global _lock
    _lock = threading.Lock()
    _close_pipe()
    _live.clear()


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
        _close_pipe()
    try:
        watchdog.wait(5.0)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


atexit.register(_kill_leftovers)
os.register_at_fork(after_in_child=_forget_in_child)
