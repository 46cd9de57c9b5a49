"""Reading a user's file first in a throwaway child process, for libraries that can hang or crash on
damaged bytes rather than raise.

HDF5 (under h5py) loops forever on some corrupt heaps: reading one attribute of a byte-damaged Keras
``.h5`` never returns, and nothing in Python can interrupt a C call that holds the GIL. So a frontend
whose library can do that reads the file once in a forked child (``read_isolated``); only when the
child finishes does the real read run, in this process, doing exactly what the child did (the same
code on the same bytes, so it finishes too). A child killed by a signal or still reading at its
deadline is the file's error, one sentence. Exceptions are not the child's business: the real read
raises them again, inside ``reading``, and they become that file's error there.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable

from nnvm.errors import ModelLoadError


def read_isolated(path: str, read: Callable[[str], object], what: str, seconds: float | None = None) -> None:
    """Run ``read(path)`` in a forked child and wait for it; raise ``ModelLoadError`` ``"{path}: {what}
    (...)"`` if it died of a signal or ran past ``seconds`` (default: 30 s plus a second per 20 MB,
    far beyond what reading an intact file takes). Where there is no ``fork``, it does nothing."""
    if not hasattr(os, "fork"):
        return
    if seconds is None:
        seconds = 30 + os.path.getsize(path) / 20e6
    with warnings.catch_warnings():  # Python 3.12 warns of fork in a threaded process; the child only
        warnings.simplefilter("ignore", DeprecationWarning)  # reads the file and leaves with os._exit
        pid = os.fork()
    if pid == 0:  # the child: read, and leave without running any of the parent's exit handlers
        try:
            read(path)
        finally:
            os._exit(0)
    deadline = time.monotonic() + seconds
    pause = 0.001
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise ModelLoadError(f"{path}: {what} (reading it did not finish in {seconds:.0f} s: the file is "
                                 "corrupt)")
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        raise ModelLoadError(f"{path}: {what} (the library reading it crashed with {name}: the file is "
                             "corrupt)")
