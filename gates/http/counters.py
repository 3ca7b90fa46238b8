"""A server's own counters from its Prometheus text page (`GET /metrics`).

Two engines' dialects: vLLM (`http_requests_total` by handler and status class from its
instrumentator, `vllm:generation_tokens_total`) and llama.cpp's llama-server with
`--metrics` (`llamacpp:tokens_predicted_total`; no request counter). A server without a
page, or without the counter asked for, gives None: the caller says it could not see.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

GENERATION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})
GENERATED_TOKENS = ("vllm:generation_tokens_total", "llamacpp:tokens_predicted_total")
_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of each sample line; comments and unreadable values skipped."""
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        with contextlib.suppress(ValueError):
            value = float(match.group(3))
            yield match.group(1), dict(_LABEL.findall(match.group(2) or "")), value


def request_counts(text: str) -> tuple[int, int] | None:
    """(answers, 5xx answers) of the generation routes from `http_requests_total`, or None
    when the page has no such counter."""
    found, answers, errors = False, 0.0, 0.0
    for name, labels, value in samples(text):
        if name != "http_requests_total":
            continue
        found = True
        if labels.get("handler") in GENERATION_ROUTES:
            answers += value
            errors += value if labels.get("status", "").startswith("5") else 0.0
    return (int(answers), int(errors)) if found else None


def generated_tokens(text: str) -> float | None:
    """Tokens the server has generated since it started (summed over its models), or None
    when the page has no such counter."""
    found = [value for name, _, value in samples(text) if name in GENERATED_TOKENS]
    return sum(found) if found else None
