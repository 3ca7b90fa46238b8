"""Parity limits by what the handoff changes (`tolerances.change`): the same weights on new
kernels get the tight band, a new quantization the defaults; a new model is refused, naming
the task gate. The bands' evidence runs on llama.cpp in the slow tests
(tests/gates/test_real_engine.py) and in benchmarks/parity_separation.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.spec import SpecError, load_spec
from gates.common.settings import PARITY_BANDS, ParityTolerances

SPECS = Path(__file__).resolve().parents[3] / "manifests" / "handoffs"


def test_the_kernels_band_is_tighter_than_the_defaults_on_every_numeric_check() -> None:
    tight, default = ParityTolerances(change="kernels"), ParityTolerances()
    assert set(PARITY_BANDS["kernels"]) >= {"kl_mean_max", "log_perplexity_ratio_max"}
    assert tight.kl_mean_max < default.kl_mean_max and tight.kl_p99_max < default.kl_p99_max
    assert tight.log_perplexity_ratio_max < default.log_perplexity_ratio_max
    assert tight.top_token_agreement_min > default.top_token_agreement_min
    assert ParityTolerances(change="quantization") == default.model_copy(
        update={"change": "quantization"}
    )


def test_a_limit_the_spec_sets_wins_over_its_band() -> None:
    assert ParityTolerances(change="kernels", kl_mean_max=0.02).kl_mean_max == 0.02
    # read back from what it dumped: the same limits, not the band's again
    dumped = ParityTolerances(change="kernels", kl_mean_max=0.02).model_dump()
    assert ParityTolerances.model_validate(dumped).kl_mean_max == 0.02


def test_a_new_model_is_refused_naming_the_task_gate() -> None:
    with pytest.raises(ValidationError, match=r"parity does not apply.*gates\.task"):
        ParityTolerances(change="model")


def test_a_spec_asking_parity_of_a_new_model_is_refused_with_its_file(tmp_path: Path) -> None:
    text = (SPECS / "clef-candle.yaml").read_text().replace("require: [chat]", "change: model")
    assert "change: model" in text
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace("../", str(SPECS.parent) + "/"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "gates.task" in str(info.value)
