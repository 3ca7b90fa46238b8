"""The spec's `bake:` section: off by default, refused with the file and field named when
it cannot work; and the request counters the bake reads from a server's /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.spec import SpecError, load_spec
from gates.http.counters import request_counts
from tests.world import spec_in


def _spec(tmp_path: Path, **bake: object) -> Path:
    return spec_in("llm-serving", "clef-candle", tmp_path, **bake)


def test_no_bake_unless_the_spec_asks(tmp_path: Path) -> None:
    assert load_spec(_spec(tmp_path)).bake.duration_s == 0


def test_a_bake_is_read_with_its_slos(tmp_path: Path) -> None:
    bake = {"duration_s": 600, "slo": {"max_error_ratio": 0.01}, "probe": {"url": "http://s.ns/"}}
    spec = load_spec(_spec(tmp_path, bake=bake)).bake
    assert (spec.duration_s, spec.slo.max_error_ratio, spec.probe.url) == (600, 0.01, "http://s.ns")


@pytest.mark.parametrize(
    ("bake", "named"),
    [
        ({"duration_s": 3, "interval_s": 5}, "interval_s 5 is longer than duration_s 3"),
        ({"duration_s": 60, "probe": {"every_s": 90}}, "probe.every_s 90 is longer"),
        ({"duration_s": 60, "probe": {"url": "clef-serve:80"}}, "bake.probe.url"),
        ({"duration_s": -1}, "bake.duration_s"),
        ({"duration_s": 60, "slo": {"max_error_ratio": 2}}, "bake.slo.max_error_ratio"),
        ({"duration_s": 60, "slo": {"max_restart": 1}}, "max_restart"),
    ],
)
def test_a_bake_that_cannot_work_is_refused(tmp_path: Path, bake: object, named: str) -> None:
    path = _spec(tmp_path, bake=bake)
    with pytest.raises(SpecError) as refused:
        load_spec(path)
    assert named in str(refused.value) and str(path) in str(refused.value)


def test_request_counts_of_the_generation_routes() -> None:
    page = "\n".join(
        [
            "# TYPE http_requests_total counter",
            'http_requests_total{handler="/v1/chat/completions",method="POST",status="2xx"} 8.0',
            'http_requests_total{handler="/v1/chat/completions",method="POST",status="5xx"} 4.0',
            'http_requests_total{handler="/v1/completions",method="POST",status="4xx"} 1.0',
            'http_requests_total{handler="/health",method="GET",status="5xx"} 9.0',
        ]
    )
    assert request_counts(page) == (13, 4)
    assert request_counts("llamacpp:requests_processing 0.0\n") is None
