"""Figures as a person reads them: rounded to what their precision means.

A time measured by a wall clock is good to about a tenth of its unit (ms or s), a ratio
to three significant digits; more digits are noise that hides the figure.
"""

from __future__ import annotations

NOT_AVAILABLE = "n/a"


def ms(value: float | None) -> str:
    """Milliseconds to 0.1 ms."""
    return NOT_AVAILABLE if value is None else f"{value:.1f}"


def seconds(value: float | None) -> str:
    """Seconds to 0.1 s."""
    return NOT_AVAILABLE if value is None else f"{value:.1f}"


def ratio(value: float | None) -> str:
    """Three significant digits, trailing zeros kept (1.00, 0.0123, 12.3)."""
    if value is None:
        return NOT_AVAILABLE
    if value == 0:
        return "0"
    shown = f"{value:#.3g}"
    return shown.rstrip(".") if "e" not in shown else shown


def figure(name: str, value: object) -> str:
    """A named figure of a report: a float by its unit's suffix (`_ms`, `_s`), else as a
    ratio; anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, float):
        return NOT_AVAILABLE if value is None else str(value)
    if name.endswith("_ms"):
        return ms(value)
    if name.endswith("_s"):
        return seconds(value)
    return ratio(value)
