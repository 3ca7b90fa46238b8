"""Gates against a chat-only server (the candle-vllm surface: /v1/models and
/v1/chat/completions only): the clef seed's spec and golden file gate it through chat, and
what a chat-only server cannot give is refused with a message naming the endpoint, the
server and what to do."""

from __future__ import annotations

from pathlib import Path

from flows.spec import load_spec
from gates.common.settings import LatencySettings
from gates.latency.gate import run_latency
from gates.parity.gate import run_parity
from gates.parity.golden_format import Golden
from gates.smoke import run_smoke
from tests.gates.conftest import FAST, HALF_TIME, StartServer

REPO = Path(__file__).resolve().parents[2]
CHAT_ONLY = ("--surface", "candle-vllm")
SEED = load_spec(REPO / "manifests" / "handoffs" / "clef-candle.yaml")


def _seed_golden() -> tuple[Golden, object]:
    assert SEED.gates.parity is not None
    return Golden.load(SEED.gates.parity.golden), SEED.gates.parity.tolerances


def test_seed_gates_a_chat_only_candle_through_chat(model_server: StartServer) -> None:
    golden, tolerances = _seed_golden()
    assert golden.server.chat and not golden.server.completions  # recorded through chat
    good = model_server("clef-flash-candle", *FAST, *CHAT_ONLY)
    smoke = run_smoke(good.url, model_id="clef-flash")
    assert smoke.passed and smoke.figures.endpoint == "/v1/chat/completions", smoke.reason
    result = run_parity(good.url, golden, tolerances)  # type: ignore[arg-type]
    assert result.passed, result.markdown()
    assert result.figures.compared_checks() == ["chat"] and result.figures.n_tokens_golden > 0
    broken = model_server("clef-flash-candle", *FAST, *CHAT_ONLY, "--fault", "zero_key_band")
    assert run_parity(broken.url, golden, tolerances).passed is False  # type: ignore[arg-type]


def test_a_chat_only_candidate_whose_logits_are_halved_fails_on_its_kl(
    model_server: StartServer,
) -> None:
    """Halved logits keep every greedy token, so the answers match word for word; only the
    distribution each position was drawn from shows it. Chat has no teacher forcing: the
    KL of the generated positions is what decides."""
    golden, tolerances = _seed_golden()
    flat = model_server("clef-flash-candle", *FAST, *CHAT_ONLY, "--fault", "halved_logits")
    result = run_parity(flat.url, golden, tolerances)  # type: ignore[arg-type]
    assert result.figures is not None
    assert result.figures.n_tokens_identical == result.figures.n_tokens_golden  # same words
    assert result.passed is False, result.markdown()
    assert "generated positions' mean KL" in result.reason, result.reason


def test_latency_over_chat_streams(model_server: StartServer) -> None:
    server = model_server("clef-flash-candle", *HALF_TIME, *CHAT_ONLY)
    assert SEED.gates.latency is not None and SEED.gates.latency.api == "chat"
    settings = SEED.gates.latency.model_copy(
        update={"levels": [1], "rounds": 3, "max_tokens": 8, "bootstrap_resamples": 200}
    )
    result = run_latency(server.url, server.url, settings)
    # Measured, whatever the verdict (no verdict too: on a loaded machine an interval may
    # span a margin): both sides answered over chat at every level.
    assert result.figures is not None and result.figures.levels, result.reason
    assert all(level.candidate.n_ok > 0 for level in result.figures.levels), result.reason
    assert all(
        level.baseline is not None and level.baseline.n_ok > 0 for level in result.figures.levels
    ), result.reason


def test_completions_latency_on_a_chat_only_server_says_what_to_do(
    model_server: StartServer,
) -> None:
    server = model_server("clef-flash-candle", *FAST, *CHAT_ONLY)
    result = run_latency(server.url, None, LatencySettings(api="completions", levels=[1]))
    assert result.passed is None
    for needed in (f"{server.url}/v1/completions", "candle-vllm", "api: chat"):
        assert needed in result.reason, result.reason


def test_teacher_forcing_of_a_chat_only_server_says_what_to_do(
    clef_golden: Golden, model_server: StartServer
) -> None:
    """The test golden holds completions, teacher forcing, probes and heads: all required."""
    server = model_server("clef-flash-candle", *FAST, *CHAT_ONLY)
    result = run_parity(server.url, clef_golden)
    assert result.passed is None
    assert "completions" in result.reason and "teacher_forced" in result.reason
    for needed in (f"{server.url}/v1/completions", "candle-vllm", "tolerances.require"):
        assert needed in result.reason, result.reason
    probes = next(e for e in result.evidence if e.startswith("not compared: probes"))
    assert "/debug/probes" in probes and "--extensions" in probes, probes
