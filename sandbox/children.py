"""Child processes that die with the sandbox, however it exits.

``with_parent(argv)`` runs ``argv`` through a small launcher that asks the kernel to send
it SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``), then becomes the program. A
``preexec_fn`` would do the same, but is not safe in a process with threads, as the sandbox
is. Without it, a sandbox killed with SIGKILL would leave etcd, the API server or a
JupyterLab running, holding their ports and the state folder.
"""

from __future__ import annotations

import shutil
import sys

PR_SET_PDEATHSIG = 1
_LAUNCH = f"""
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL("libc.so.6", use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM)
    if os.getppid() == 1:
        sys.exit(1)
os.execv(sys.argv[1], sys.argv[1:])
"""


def with_parent(argv: list[str]) -> list[str]:
    """``argv`` (its program looked up on PATH) as a child that dies with this process."""
    program = argv[0] if "/" in argv[0] else (shutil.which(argv[0]) or argv[0])
    return [sys.executable, "-c", _LAUNCH, program, *argv[1:]]
