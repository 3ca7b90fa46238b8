"""The gates against a real engine with no adapter: llama.cpp (llama-cpp-python's server)
serving SmolLM2-135M-Instruct. A golden recorded from the Q4_1 model over the long reference
text (303 positions: a shorter text cannot show a benign change within the perplexity
limit, `gates/parity/perplexity.py`) passes the same settings restarted and a non-trivial
benign change (flash attention); the zeroed-key-band model and a wrong chat template fail.
`handoff golden record` and `gate smoke|parity|latency` run from the command line against
it.

Slow (logprobs cost llama-cpp-python a sort of the 49k vocabulary per position, so each
side over the long reference takes half a minute on a quiet machine, minutes on a loaded
one): the other benign numeric changes (f32 KV cache, threads, prompt batch) pass, and
against an F16 golden each band of `tolerances.change` passes the changes it is for."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.parity_separation import CHECKS, Q4_CASES, Row
from benchmarks.tables.parity import tabulate
from cli import app
from gates.common.settings import ParityTolerances
from gates.parity.gate import Candidate, collect_candidate, judge
from gates.parity.golden import record_golden, record_golden_async
from gates.parity.golden_format import Golden, GoldenSettings, LongContextSettings
from gates.smoke import run_smoke
from sandbox.engines.llamacpp import MODEL_NAME, ServerOptions, ServerPool, Variant
from tests.gates.conftest import REPO

PROMPTS = REPO / "manifests" / "prompts" / "smollm2.jsonl"
REFERENCE_LONG = REPO / "manifests" / "prompts" / "reference-long.txt"
runner = CliRunner()
# Logprobs cost llama-cpp-python a sort of the 49k vocabulary per position: on a loaded
# 2-core machine a golden and its variants take minutes, not the usual seconds.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def q4_golden(llamacpp: ServerPool) -> Golden:
    """Over the long reference text: where benign and harmful changes separate."""
    return record_golden(llamacpp.get("q4_1").url, PROMPTS, reference_file=REFERENCE_LONG)


def test_golden_records_what_the_server_offers_and_how_it_was_asked(q4_golden: Golden) -> None:
    server = q4_golden.server
    assert server.completions and server.chat and server.chat_logprobs
    assert not server.token_ids  # llama.cpp names tokens by text
    assert server.echo_alignment == "predicts-next" and server.text_offset_base == "prompt"
    assert server.tokenize_path == "/extras/tokenize"
    sampling = q4_golden.settings.sampling
    assert sampling["temperature"] == 0 and sampling["repeat_penalty"] == 1.0
    assert sampling["top_k"] == 0 and sampling["min_p"] == 0
    assert len(q4_golden.outputs.reference or []) > 300  # scored position by position
    chats = [c for c in q4_golden.outputs.completions if c.api == "chat"]
    assert chats and all(c.steps and c.prompt_tokens for c in chats)
    # greedy really is greedy now: every chosen token is the argmax of its own logprobs
    steps = [s for c in q4_golden.outputs.completions for s in c.steps]
    argmax = [s.logprob is not None and s.logprob >= max(a.logprob for a in s.top) for s in steps]
    assert sum(argmax) / len(argmax) > 0.99


# Variants of the reference, each collected by a server of its own, side by side (a
# server answers one request at a time, so a set costs about its slowest member).
Variants = dict[str, tuple[Variant, ServerOptions]]
FAST: Variants = {
    "restarted": ("q4_1", ServerOptions()),
    "flash-attention": ("q4_1", ServerOptions(flash_attn=True)),
    "zeroed-key-band": ("q4_1-zkb", ServerOptions()),
    "wrong-chat-template": ("q4_1", ServerOptions(chat_format="llama-2")),
}
BENIGN: Variants = {  # the rest of the benign numeric changes
    "f32-kv-cache": ("q4_1", ServerOptions(type_k="f32", type_v="f32")),
    "2-threads": ("q4_1", ServerOptions(n_threads=2)),
    "batch-8": ("q4_1", ServerOptions(n_batch=8)),
}


def collect_all(pool: ServerPool, golden: Golden, variants: Variants) -> dict[str, Candidate]:
    """Every variant's answers to ``golden``; "restarted" is a twin of the pool's default
    server for its options (another process, same settings)."""

    def collect(name: str) -> Candidate:
        variant, options = variants[name]
        server = pool.get(variant, options, instance="twin" if name == "restarted" else "")
        return asyncio.run(collect_candidate(server.url, golden, model_id=golden.model_id))

    with ThreadPoolExecutor(len(variants)) as pool_threads:
        return dict(zip(variants, pool_threads.map(collect, variants), strict=True))


@pytest.fixture(scope="module")
def variants(q4_golden: Golden, llamacpp: ServerPool) -> dict[str, Candidate]:
    return collect_all(llamacpp, q4_golden, FAST)


@pytest.fixture(scope="module")
def benign_variants(q4_golden: Golden, llamacpp: ServerPool) -> dict[str, Candidate]:
    return collect_all(llamacpp, q4_golden, BENIGN)


@pytest.mark.parametrize("name", ["restarted", "flash-attention"])
def test_identical_and_a_benign_change_pass(
    q4_golden: Golden, variants: dict[str, Candidate], name: str
) -> None:
    result = judge(q4_golden, variants[name], ParityTolerances())
    assert result.passed, result.markdown()
    assert result.figures.compared_checks() == ["chat", "completions", "teacher_forced"]
    check = result.figures.perplexity
    assert check is not None and check.outcome == "within", check  # shown, not just unshown


@pytest.mark.slow
@pytest.mark.parametrize("name", BENIGN)
def test_the_other_benign_variants_pass(
    q4_golden: Golden, benign_variants: dict[str, Candidate], name: str
) -> None:
    result = judge(q4_golden, benign_variants[name], ParityTolerances())
    assert result.passed, result.markdown()
    assert result.figures.compared_checks() == ["chat", "completions", "teacher_forced"]


def test_smoke_passes_the_engine_and_fails_one_serving_another_model(llamacpp: ServerPool) -> None:
    served = llamacpp.get("q4_1")
    assert run_smoke(served.url, model_id=MODEL_NAME).passed
    other = llamacpp.get("q4_1", ServerOptions(model_alias="another-model"))
    result = run_smoke(other.url, model_id=MODEL_NAME)
    assert result.passed is False and "another-model" in result.reason, result.reason


def test_zeroed_key_band_fails(q4_golden: Golden, variants: dict[str, Candidate]) -> None:
    result = judge(q4_golden, variants["zeroed-key-band"], ParityTolerances())
    assert result.passed is False, result.markdown()
    assert any("teacher-forced" in e for e in result.evidence), result.evidence


def test_wrong_chat_template_fails(q4_golden: Golden, variants: dict[str, Candidate]) -> None:
    result = judge(q4_golden, variants["wrong-chat-template"], ParityTolerances())
    assert result.passed is False, result.markdown()
    assert any("another chat template" in e for e in result.evidence), result.evidence
    # raw completions do not go through the template: they still agree
    assert all(p.passed for p in result.figures.prompts if p.api == "completions")


def test_the_calibration_benchmark_tabulates_these_variants(
    q4_golden: Golden, variants: dict[str, Candidate]
) -> None:
    """benchmarks/parity_separation.py (docs/gates.md, "Tolerances from evidence") runs its
    table over the variants collected here, which are four of its cases: its code runs at
    every commit, and the key band's teacher-forced KL stays well past every benign one."""
    cases = {(c.variant, c.options): c for c in Q4_CASES}
    rows = [
        Row(cases[FAST[name]], judge(q4_golden, variants[name], ParityTolerances())).record()
        for name in FAST
    ]
    table = tabulate("q4_1 reference, the default run's variants", rows, CHECKS)
    made = [c for c in CHECKS if any(r.figures[c] is not None for r in rows)]
    assert made and all(f"| {c.replace('|', chr(92) + '|')} |" in table for c in made), table
    mean_kl = next(line for line in table.splitlines() if line.startswith("| tf mean KL |"))
    margin = mean_kl.rstrip(" |").rsplit("|", 1)[-1].strip()
    assert margin.endswith("x") and float(margin[:-1]) > 5, mean_kl
    benign = [line for line in table.splitlines() if " | benign | " in line]
    assert len(benign) == 2 and all(" | benign | pass | " in line for line in benign), table


@pytest.mark.slow  # 4 min on 2 cores; the judge on this engine runs by default above
def test_cli_golden_and_every_gate_on_the_real_server(llamacpp: ServerPool, tmp_path: Path) -> None:
    # One raw completion, one chat turn and a sentence to score: the commands, not the
    # verdicts (the tests above judge those), so few logprob positions.
    lines = PROMPTS.read_text().splitlines()
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(lines[0] + "\n" + next(x for x in lines if '"messages"' in x) + "\n")
    reference = tmp_path / "reference.txt"
    reference.write_text("A Service keeps its address while its selector moves to new pods.\n")
    live = llamacpp.get("q4_1")
    golden_file = tmp_path / "smollm2.json"
    recorded = runner.invoke(
        app,
        [
            *("golden", "record", "--url", live.url, "--prompts", str(prompts)),
            *("--reference", str(reference), "--out", str(golden_file)),
        ],
    )
    assert recorded.exit_code == 0, recorded.output
    assert "chat logprobs" in recorded.output
    model = Golden.load(golden_file).model_id
    smoke = runner.invoke(app, ["gate", "smoke", "--url", live.url, "--model", model])
    assert smoke.exit_code == 0, smoke.output
    # a twin of the live server: a sentence cannot judge a numeric change (the long
    # reference text does), it only shows the commands work end to end
    candidate = llamacpp.get("q4_1", instance="twin")
    parity = runner.invoke(
        app, ["gate", "parity", "--url", candidate.url, "--golden", str(golden_file)]
    )
    assert parity.exit_code == 0, parity.output
    settings = tmp_path / "latency.yaml"
    settings.write_text(
        "levels: [1]\nmax_tokens: 12\nrounds: 2\nmin_requests_per_round: 3\n"
        "bootstrap_resamples: 300\nread_timeout_s: 20\n"
    )
    latency = runner.invoke(
        app,
        [
            *("gate", "latency", "--url", candidate.url, "--baseline", live.url),
            *("--settings", str(settings), "--json"),
        ],
    )
    # Measured, not an error: a verdict, or (exit 2) no verdict over measured levels.
    assert latency.exit_code in (0, 1, 2), latency.output
    level = json.loads(latency.output)["figures"]["levels"][0]
    assert level["candidate"]["n_failed"] == level["baseline"]["n_failed"] == 0


@pytest.mark.slow
def test_each_band_passes_the_changes_it_is_for_and_fails_the_rest(llamacpp: ServerPool) -> None:
    """Bands by kind of change (docs/gates.md), against a golden from F16: flash attention on
    the same weights passes the tight `kernels` band; Q8_0 quantized by llama.cpp and the
    F16 -> Q4_1 pair fail it and pass `quantization` (a measured distance, not zero); the
    zeroed key band fails both."""
    golden = record_golden(llamacpp.get("f16").url, PROMPTS, reference_file=REFERENCE_LONG)
    found = collect_all(
        llamacpp,
        golden,
        {
            "flash-attention": ("f16", ServerOptions(flash_attn=True)),
            "q8_0": ("q8_0", ServerOptions()),
            "q4_1": ("q4_1", ServerOptions()),
            "q4_1-zkb": ("q4_1-zkb", ServerOptions()),
        },
    )
    verdicts = {
        (name, change): judge(golden, candidate, ParityTolerances(change=change))
        for name, candidate in found.items()
        for change in ("kernels", "quantization")
    }
    expected = {
        "flash-attention": (True, True),
        "q8_0": (False, True),
        "q4_1": (False, True),
        "q4_1-zkb": (False, False),
    }
    for name, (kernels, quantization) in expected.items():
        for change, wanted in (("kernels", kernels), ("quantization", quantization)):
            result = verdicts[name, change]
            assert result.passed is wanted, f"{name}, change: {change}\n{result.markdown()}"
    tf = verdicts["q8_0", "quantization"].figures.teacher_forced
    assert tf is not None and tf.kl_mean > 0  # not the same model: a measured distance


# Long context: prompts cut from one long text at growing lengths. A benign numeric change
# (flash attention) stays flat; a rotary base half the model's (a position-dependent change
# whose short-text teacher-forced figures pass) rises with position; a context window of
# 1024 tokens refuses the prompts the 2048-token golden server answered.
LONG: Variants = {
    "restarted": ("q4_1", ServerOptions()),
    "flash-attention": ("q4_1", ServerOptions(flash_attn=True)),
    "rotary-base-half": ("q4_1", ServerOptions(rope_freq_base=50000.0)),
    "context-1024": ("q4_1", ServerOptions(n_ctx=1024)),
}


def long_context_findings(golden: Golden, candidate: Candidate) -> list[str]:
    result = judge(golden, candidate, ParityTolerances(require=["long_context"]))
    assert result.figures.long_context is not None, result.markdown()
    return [f for f in result.evidence if f.startswith("long context")]


@pytest.mark.slow  # 8 min on 2 cores (five servers, 2,000-token prompts); the long-context
# rules run by default on the simulator (tests/gates/parity/test_long_context.py)
def test_long_context_parity_fails_position_dependent_changes_only(llamacpp: ServerPool) -> None:
    settings = GoldenSettings(prompts=[], long_context=LongContextSettings(tokens=2000))
    server = llamacpp.get("q4_1")
    golden = asyncio.run(record_golden_async(server.url, model_id=None, settings=settings))
    long = golden.outputs.long_context
    assert long is not None and long.probes
    assert 1900 <= (long.probes[-1].prompt_tokens or 0) <= 2000
    found = collect_all(llamacpp, golden, LONG)
    assert long_context_findings(golden, found["restarted"]) == []
    assert long_context_findings(golden, found["flash-attention"]) == []
    rotary = long_context_findings(golden, found["rotary-base-half"])
    assert any("grows with position" in f for f in rotary), rotary
    short = long_context_findings(golden, found["context-1024"])
    assert short and "context is shorter" in short[0] and "1024 tokens" in short[0], short
