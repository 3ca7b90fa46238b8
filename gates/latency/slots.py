"""How many requests a server runs at once, where its command line says, and latency
levels kept within it.

Past its slots a server queues (vLLM, candle-vllm, llama.cpp) or cuts running streams
(llama-cpp-python by default), so a level above them measures the queue or the cuts, not
the engine. The gate's default levels are brought within the slots; levels a spec names
are kept, with a note that they exceed them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from gates.common.settings import LatencySettings

# Flags that cap the requests a server runs at once: vLLM's and candle-vllm's batch cap,
# llama.cpp server's slots.
SLOT_FLAGS = ("--max-num-seqs", "--parallel", "-np")


class Slots(BaseModel):
    """A server's slots and where they were read."""

    count: int
    source: str

    def tighter(self, other: Slots | None) -> Slots:
        return self if other is None or self.count <= other.count else other


def slots_in_args(argv: Sequence[str]) -> tuple[int, str] | None:
    """The slots a command line sets, and the flag as written; None where no flag says,
    or its value is no positive whole number (the server itself would refuse it)."""
    for i, word in enumerate(argv):
        flag, eq, inline = word.partition("=")
        if flag not in SLOT_FLAGS:
            continue
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if value.isdigit() and int(value) > 0:
            return int(value), f"{flag} {value}"
    return None


def within_slots(settings: LatencySettings, slots: Slots | None) -> tuple[LatencySettings, str]:
    """The settings to measure with, and a note for the report ("" when nothing to say):
    default levels above the slots come down to them; levels the spec names stay."""
    if slots is None:
        return settings, ""
    over = [n for n in settings.levels if n > slots.count]
    if not over:
        return settings, ""
    if "levels" in settings.model_fields_set:
        return settings, (
            f"level(s) {', '.join(map(str, over))} exceed the {slots.count} requests the "
            f"server runs at once ({slots.source}): past them requests wait in its queue, so "
            "those levels measure the queue as much as the engine; name levels within the "
            "slots to measure the engine alone"
        )
    levels = sorted({min(n, slots.count) for n in settings.levels})
    chosen = settings.model_copy(update={"levels": levels})
    return chosen, (
        f"levels {', '.join(map(str, levels))}: the default levels "
        f"{', '.join(map(str, settings.levels))} kept within the {slots.count} requests the "
        f"server runs at once ({slots.source})"
    )
