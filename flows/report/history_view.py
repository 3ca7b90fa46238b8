"""How `handoff history` shows the records: kubectl-style columns that fit 80
characters, a wide view, and one handoff in full. Pure functions of the entries."""

from __future__ import annotations

import datetime as dt
from typing import Any

WIDTH = 80
GAP = "  "
# Columns that may be cut (with "…") to keep the default view within WIDTH.
_SHRINKABLE = ("SERVICE", "APPROVER")
_MIN_WIDTH = 8


def _when(entry: dict[str, Any]) -> str:
    stamp = entry.get("finished_at") or entry.get("started_at") or ""
    try:
        return dt.datetime.fromisoformat(stamp).strftime("%m-%d %H:%M")
    except ValueError:
        return stamp or "-"


def took_s(entry: dict[str, Any]) -> float | None:
    """Wall time from start to finish, else the sum of the step durations."""
    try:
        start = dt.datetime.fromisoformat(entry["started_at"])
        end = dt.datetime.fromisoformat(entry["finished_at"])
        return (end - start).total_seconds()
    except (KeyError, TypeError, ValueError):
        durations = entry.get("durations_s") or {}
        return sum(durations.values()) if durations else None


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def approvers(entry: dict[str, Any]) -> list[str]:
    """The people who approved: a list of approvals, or the single approver of older records."""
    listed = entry.get("approvals") or []
    names = [
        str(a.get("approver") or a.get("by") or "?")
        + (" (signed)" if str(a.get("identity") or "").startswith("signed") else "")
        if isinstance(a, dict)
        else str(a)
        for a in listed
    ]
    names = list(dict.fromkeys(names))  # one person approving twice (in place) is named once
    return names or ([entry["approver"]] if entry.get("approver") else [])


def _trigger(entry: dict[str, Any]) -> str:
    trigger = entry.get("trigger") or {}
    commit = (trigger.get("merge_commit") or "")[:12]
    if commit and trigger.get("source") == "reconciler":  # a merge it found never handed off
        return f"{commit} (reconciler)"
    return commit or trigger.get("source") or "-"


def _gates(entry: dict[str, Any]) -> str:
    return ",".join(f"{k}:{v}" for k, v in (entry.get("gates") or {}).items()) or "-"


def downtime(entry: dict[str, Any]) -> str:
    """In place: measured, against the declared estimate and bound."""
    if entry.get("downtime_bound_s") is None:
        return "-"
    measured = entry.get("downtime_measured_s")
    return (
        f"{measured if measured is not None else '?'} of "
        f"~{entry.get('downtime_estimate_s')}, <= {entry['downtime_bound_s']}"
    )


def rows(entries: list[dict[str, Any]], *, wide: bool) -> list[list[str]]:
    header = ["WHEN", "SERVICE", "OUTCOME", "STRATEGY", "APPROVER", "TOOK"]
    if wide:
        header += ["ID", "SPEC", "TRIGGER", "IMAGE", "GATES", "DOWNTIME(S)", "CAUSE"]
    table = [header]
    for e in entries:
        row = [
            _when(e),
            e.get("service") or "-",
            e.get("outcome") or "-",
            e.get("strategy") or "-",
            ",".join(approvers(e)) or "-",
            duration(took_s(e)),
        ]
        if wide:
            row += [
                e.get("handoff_id") or "-",
                e.get("spec") or "-",
                _trigger(e),
                (e.get("image") or "-").split("/")[-1],
                _gates(e),
                downtime(e),
                e.get("cause") or "-",
            ]
        table.append(row)
    return table


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def columns(table: list[list[str]], *, limit: int | None) -> str:
    """Left-aligned columns; with a limit, the shrinkable columns are cut to fit it."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    if limit is not None:
        shrinkable = [table[0].index(name) for name in _SHRINKABLE]
        for i in sorted(shrinkable, key=lambda i: -widths[i]):  # the widest gives first
            excess = sum(widths) + len(GAP) * (len(widths) - 1) - limit
            if excess > 0:
                widths[i] = max(_MIN_WIDTH, widths[i] - excess)
    lines = [
        GAP.join(_cut(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    return "\n".join(lines)


def listing(entries: list[dict[str, Any]], *, wide: bool = False) -> str:
    return columns(rows(entries, wide=wide), limit=None if wide else WIDTH)


def find(entries: list[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The entries whose handoff id or flow run id is run_id or starts with it."""
    return [
        e
        for e in entries
        if any(str(e.get(k) or "").startswith(run_id) for k in ("handoff_id", "flow_run_id"))
    ]


def _lines(title: str, items: Any, show: Any) -> list[str]:
    """A titled block, one line per recorded item; nothing when none was recorded."""
    shown = [show(i) for i in items or [] if isinstance(i, dict)]
    return [title, *[f"  {line}" for line in shown]] if shown else []


def _drained(d: dict[str, Any]) -> str:
    """A workload's drain before it stopped: the signal and how long (flows/drain.py)."""
    left = d.get("left") or 0
    how = (
        f"{left} still in flight at the {d.get('bound_s')} s grace period"
        if left
        else f"drained in {d.get('waited_s')} s"
    )
    note = f" ({d['detail']})" if d.get("detail") else ""
    return f"{d.get('workload')}: {how}, by {d.get('signal')}{note}"


def _way_back(w: dict[str, Any]) -> str:
    """A retired workload's cost of serving again (flows/wayback.py)."""
    seconds = w.get("start_s")
    cost = "unknown" if seconds is None else f"about {float(seconds):.0f} s"
    return f"{w.get('workload')}: {cost} to serve again from 0 ({w.get('basis')})"


def _bundle(ref: Any) -> list[str]:
    """The evidence bundle's digest, where it is kept, and who signed it (or why not)."""
    if not isinstance(ref, dict):
        return []
    signed = f"signed {ref.get('keyid')}" if ref.get("signed") else "UNSIGNED"
    lines = [
        f"Bundle:     sha256 {ref.get('sha256')} ({signed})",
        f"            ConfigMap {ref.get('configmap')} key {ref.get('key')}",
    ]
    return lines + ([f"            {ref['note']}"] if ref.get("note") else [])


def detail(entry: dict[str, Any]) -> str:
    """One handoff in full: what, outcome and cause first, then steps, gates, approvals."""
    lines = [
        f"Handoff:    {entry.get('handoff_id', '-')}",
        f"Service:    {entry.get('namespace', '-')}/{entry.get('service', '-')}",
        f"Spec:       {entry.get('spec', '-')}",
        f"Outcome:    {entry.get('outcome', '-')}",
    ]
    if entry.get("cause"):
        lines.append(f"Cause:      {entry['cause']}")
    lines += [
        f"Strategy:   {entry.get('strategy') or '-'}",
        f"Trigger:    {_trigger(entry)}",
        f"Image:      {entry.get('image') or '-'}",
        f"Started:    {entry.get('started_at') or '-'}",
        f"Finished:   {entry.get('finished_at') or '-'}",
        f"Took:       {duration(took_s(entry))}",
    ]
    if entry.get("downtime_bound_s") is not None:
        lines.append(f"Downtime:   {downtime(entry)} s (measured of declared)")
    lines += _lines("Drained:", entry.get("drains"), _drained)
    lines += _lines("Way back:", entry.get("way_back"), _way_back)
    steps = entry.get("durations_s") or {}
    lines.append("Steps:" + ("" if steps else "      -"))
    lines += [f"  {name:<12}{seconds:>9.1f}s" for name, seconds in steps.items()]
    gates = entry.get("gates") or {}
    lines.append("Gates:" + ("" if gates else "      -"))
    figures = entry.get("gate_figures") or {}
    for name, verdict in gates.items():
        lines.append(f"  {name:<12}{verdict}")
        for key, value in (figures.get(name) or {}).items():
            lines.append(f"    {key}: {value}")
    listed = [a for a in entry.get("approvals") or [] if isinstance(a, dict)]
    names = approvers(entry)
    lines.append("Approvals:" + ("" if listed else f"  {', '.join(names) if names else '-'}"))
    lines += [
        f"  {a.get('at', '-')}  {a.get('approver', '?')} {a.get('decision', '?')} "
        f"{a.get('what', '')}" + (f": {a['reason']}" if a.get("reason") else "")
        for a in listed
    ]
    if entry.get("evidence_sha256"):
        lines.append(f"Evidence:   sha256 {entry['evidence_sha256']}")
    lines += _bundle(entry.get("evidence_bundle"))
    lines += [f"Fix:        {fix}" for fix in entry.get("fixes") or []]
    prefect = entry.get("prefect") or {}
    if prefect.get("url"):
        lines.append(f"Run:        {prefect['url']} ({prefect.get('state', '?')})")
    return "\n".join(lines)
