"""The test files run longest first, as last recorded, files not recorded first; a run
asked to record writes each file's seconds."""

from __future__ import annotations

import json

import pytest

from tests.schedule import RECORD_ENV, longest_first

pytest_plugins = ["pytester"]

FILES = {
    "test_many.py": "".join(f"def test_{n}():\n    pass\n" for n in range(5)),
    "test_long.py": (
        "import time\n\ndef test_a():\n    time.sleep(0.3)\n\ndef test_b():\n    pass\n"
    ),
    "test_new.py": "def test_x():\n    pass\n",
}


def test_files_go_longest_first_and_unrecorded_ones_before_them(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(**{name[:-3]: source for name, source in FILES.items()})
    items, _ = pytester.inline_genitems()
    longest_first(items, {"test_many.py": 1.0, "test_long.py": 90.0})
    order = [item.nodeid for item in items]
    assert order == [
        "test_new.py::test_x",
        "test_long.py::test_a",
        "test_long.py::test_b",
        *(f"test_many.py::test_{n}" for n in range(5)),
    ], order


def test_a_recording_run_writes_each_files_seconds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(**{name[:-3]: source for name, source in FILES.items()})
    pytester.makeconftest(
        "from tests.schedule import configure\n\n"
        "def pytest_configure(config):\n    configure(config)\n"
    )
    out = pytester.path / "durations.json"
    monkeypatch.setenv(RECORD_ENV, str(out))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=8)
    record = json.loads(out.read_text())
    files = record["files"]
    assert set(files) == set(FILES) and files["test_long.py"] >= 0.3, files
    assert next(iter(files)) == "test_long.py"  # written longest first
    assert record["commit"] and record["date"] and len(record["load_average_1_5_15"]) == 3
