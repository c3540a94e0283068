"""One writer per run folder: an exclusive ``flock`` on ``RUN/.lock``, held for the whole run.

The kernel drops the lock when its holder exits in any way (kill -9 included), so a stale
lock never blocks a resume; a second ``vheads study`` on a folder in use is refused at
once. The lock file keeps the holder's process id for the message. Where ``fcntl`` does
not exist (Windows) no lock is taken.
"""

from __future__ import annotations

import os
from pathlib import Path

from vheads._errors import VheadsError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

LOCK_NAME = ".lock"


class RunLock:
    """``with RunLock(run_dir):`` — the exclusive right to write ``run_dir``."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        if fcntl is None:
            return self
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise VheadsError(
                f"run folder {self.path.parent} is in use by another vheads study (process {holder or '?'}); "
                "nothing was changed. Wait for it to finish (rerun then resumes), or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None
