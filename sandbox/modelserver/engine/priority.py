"""Real-time scheduling for the threads that pace tokens, where the OS permits it.

The server simulates a dedicated GPU box on a shared CPU: other processes' load would
otherwise show up as token jitter. SCHED_FIFO (root or CAP_SYS_NICE) lets a waking thread
preempt ordinary processes at once; the kernel's RT throttling still leaves them 5 % of
each second even if one of these threads misbehaved. Without permission this is a no-op.
Threads and processes started later by an RT thread fall back to normal scheduling
(SCHED_RESET_ON_FORK) until they choose a priority of their own.
"""

from __future__ import annotations

import os

CLOCK_PRIORITY = 30
LOOP_PRIORITY = 20
RESULTS_PRIORITY = 15  # every thread of the server process that takes the GIL must be RT,
# or a preempted ordinary thread holding it would stall the RT ones (priority inversion)
COMPUTE_PRIORITY = 10  # the compute process: ahead of ordinary processes, behind the pacing


def use_realtime(priority: int) -> bool:
    """Move the calling thread to SCHED_FIFO at `priority`; False if not permitted."""
    try:
        policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except (PermissionError, OSError, AttributeError):
        return False
    return True
