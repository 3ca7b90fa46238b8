"""`handoff golden` and `handoff gate` commands: files written and read back, reports printed,
`--json` parseable, exit codes 0 pass, 1 fail, 2 error or no verdict."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from cli import app
from gates.parity.golden_format import Golden
from tests.gates.conftest import FAST, HALF_TIME, PARITY_PROMPTS, REFERENCE_TEXT, StartServer

runner = CliRunner()


def test_golden_record_then_parity_pass_and_fail(model_server: StartServer, tmp_path: Path) -> None:
    reference = model_server("clef-flash-pytorch", *FAST)
    golden_file = tmp_path / "clef-flash.json"
    recorded = runner.invoke(
        app,
        [
            "golden",
            "record",
            "--url",
            reference.url,
            "--prompts",
            str(PARITY_PROMPTS),
            "--reference",
            str(REFERENCE_TEXT),
            "--out",
            str(golden_file),
        ],
    )
    assert recorded.exit_code == 0, recorded.output
    golden = Golden.load(golden_file)
    assert golden.settings.reference_text == REFERENCE_TEXT.read_text()
    assert golden.model_id == "clef-flash" and golden.outputs.completions
    shown = runner.invoke(app, ["golden", "show", str(golden_file)])
    assert "handoff.golden/v2" in shown.output

    good = model_server("clef-flash-candle", *FAST)
    passed = runner.invoke(
        app, ["gate", "parity", "--url", good.url, "--golden", str(golden_file), "--json"]
    )
    assert passed.exit_code == 0, passed.output
    assert json.loads(passed.output)["passed"] is True

    broken = model_server("clef-flash-candle", *FAST, "--fault", "zero_key_band")
    failed = runner.invoke(
        app, ["gate", "parity", "--url", broken.url, "--golden", str(golden_file)]
    )
    assert failed.exit_code == 1
    assert "parity gate: FAIL" in failed.output


def test_parity_out_writes_the_report_and_a_picture_of_the_divergences(
    clef_golden: Golden, model_server: StartServer, tmp_path: Path
) -> None:
    golden_file = tmp_path / "golden.json"
    clef_golden.save(golden_file)
    broken = model_server("clef-flash-candle", *FAST, "--fault", "zero_key_band")
    good = model_server("clef-flash-candle", *FAST)
    pictures = {}
    for name, server in (("broken", broken), ("good", good)):
        out = tmp_path / name
        gate = ["gate", "parity", "--url", server.url, "--golden", str(golden_file)]
        result = runner.invoke(app, [*gate, "--out", str(out)])
        assert result.exit_code == (1 if name == "broken" else 0), result.output
        report = json.loads((out / "parity.json").read_text())
        for prompt in report["figures"]["prompts"]:  # up to the first divergence, no further
            assert len(prompt["kl"]) == min(prompt["n_identical"] + 1, prompt["n_golden_tokens"])
        assert len(report["figures"]["teacher_forced"]["kl_along"]) > 0
        assert sorted(p.name for p in out.iterdir()) == ["parity.json", "parity.png"]
        with Image.open(out / "parity.png") as picture:
            assert picture.format == "PNG" and picture.size[0] == 880
            pictures[name] = picture.convert("RGB")
    # The failing divergences are drawn as red crosses: on the broken candidate's only.
    assert _pixels_near(pictures["broken"], (214, 39, 40)) > 30
    assert _pixels_near(pictures["good"], (214, 39, 40)) == 0
    # Identical tokens are green bars: the good candidate's are longer.
    green = (44, 160, 44)
    assert _pixels_near(pictures["good"], green) > _pixels_near(pictures["broken"], green) > 0

    unwritable = tmp_path / "file"
    unwritable.write_text("")
    refused = runner.invoke(
        app,
        [
            "gate",
            "parity",
            "--url",
            good.url,
            "--golden",
            str(golden_file),
            "--out",
            str(unwritable / "sub"),
        ],
    )
    assert refused.exit_code == 2 and "choose a writable --out" in refused.output


def test_smoke_exit_codes(model_server: StartServer) -> None:
    server = model_server("clef-flash-candle", *FAST)
    ok = runner.invoke(app, ["gate", "smoke", "--url", server.url, "--model", "clef-flash"])
    assert ok.exit_code == 0, ok.output
    wrong = runner.invoke(app, ["gate", "smoke", "--url", server.url, "--model", "other"])
    assert wrong.exit_code == 1


def test_missing_golden_file_is_an_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "gate",
            "parity",
            "--url",
            "http://127.0.0.1:9",
            "--golden",
            str(tmp_path / "absent.json"),
        ],
    )
    assert result.exit_code == 2
    assert "handoff golden record" in result.output


def test_latency_settings_file_and_json(model_server: StartServer, tmp_path: Path) -> None:
    server = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    settings = tmp_path / "latency.yaml"
    settings.write_text(
        "levels: [2]\nmax_tokens: 4\nrounds: 1\nmin_requests_per_round: 6\nslo: {tpot_ms: 1000}\n"
    )
    result = runner.invoke(
        app, ["gate", "latency", "--url", server.url, "--settings", str(settings), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["figures"]["levels"][0]["slo_checks"][0]["met"] is True
    bad = runner.invoke(app, ["gate", "latency", "--url", server.url, "--levels", "one"])
    assert bad.exit_code == 2


def _pixels_near(image: Image.Image, colour: tuple[int, int, int]) -> int:
    return sum(
        1
        for pixel in image.get_flattened_data()
        if all(abs(a - b) <= 40 for a, b in zip(pixel, colour, strict=True))
    )


def test_latency_out_writes_the_report_and_a_cdf_picture_per_level(
    model_server: StartServer, tmp_path: Path
) -> None:
    live = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    candidate = model_server("gptq-30b-a3b-tp1", *HALF_TIME)
    settings = tmp_path / "latency.yaml"
    settings.write_text(
        "levels: [1, 2]\nmax_tokens: 4\nrounds: 1\nmin_requests_per_round: 6\n"
        "slo: {ttft_ms: 5000, tpot_ms: 60}\n"
    )
    out = tmp_path / "report"
    gate = ["gate", "latency", "--url", candidate.url, "--settings", str(settings)]
    result = runner.invoke(app, [*gate, "--baseline", live.url, "--out", str(out)])
    assert result.exit_code in (0, 1, 2), result.output
    report = json.loads((out / "latency.json").read_text())
    for level in report["figures"]["levels"]:
        for side in ("candidate", "baseline"):
            cdf = level[side]["cdf_ms"]
            assert len(cdf["ttft"]) == level[side]["n_ok"] and cdf["ttft"] == sorted(cdf["ttft"])
            assert cdf["itl"] and cdf["tpot"]
    assert sorted(p.name for p in out.glob("*.png")) == ["latency-c1.png", "latency-c2.png"]
    with Image.open(out / "latency-c2.png") as picture:
        assert picture.format == "PNG" and picture.size[0] > 600
        rgb = picture.convert("RGB")
    assert _pixels_near(rgb, (143, 187, 217)) > 50  # baseline's curves (tab:blue, alpha 0.5)
    assert _pixels_near(rgb, (255, 127, 14)) > 50  # candidate's curves
    assert _pixels_near(rgb, (214, 39, 40)) > 20  # the margins (dashed red)

    unwritable = tmp_path / "file"
    unwritable.write_text("")
    refused = runner.invoke(app, [*gate, "--out", str(unwritable / "sub")])
    assert refused.exit_code == 2 and "choose a writable --out" in refused.output
