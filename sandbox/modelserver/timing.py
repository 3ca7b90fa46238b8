"""Step time and jitter from the ground-truth file, over the window where every stream runs.

Decode gaps are the differences between consecutive token stamps of one request. Only gaps
entirely inside [last first-token, first last-token] count, so ramp-up (prefills, queueing)
and ramp-down (a shrinking batch) do not blur the batch size being measured.
"""

from __future__ import annotations

import numpy as np

from sandbox.modelserver.api.groundtruth import RequestTiming


def steady_gaps_ms(records: list[RequestTiming]) -> np.ndarray:
    stamps = [np.asarray(r.token_times_ns, dtype=np.int64) for r in records if r.token_times_ns]
    if not stamps:
        return np.zeros(0)
    start = max(int(s[0]) for s in stamps)
    end = min(int(s[-1]) for s in stamps)
    gaps = []
    for s in stamps:
        inside = s[(s >= start) & (s <= end)]
        gaps.append(np.diff(inside))
    return np.concatenate(gaps) / 1e6


def jitter_ms(records: list[RequestTiming], interval_ms: float) -> np.ndarray:
    """|gap - interval| for every steady gap: how far each token strays from the cadence."""
    return np.abs(steady_gaps_ms(records) - interval_ms)
