"""Parity tolerances from evidence: benign and harmful variants of a real engine.

Runs llama.cpp (llama-cpp-python's server, SmolLM2-135M-Instruct) as a reference, records a
golden file from it (the parity prompt set and a ~750-token teacher-forced text), then runs
the parity gate against each variant, one server at a time:

- benign: the same settings restarted, an f32 KV cache, flash attention, 2 threads, a
  prompt batch of 8 (numerics change, the model does not);
- harmful: the zeroed key band (attention keys of 10 layers lose 48 channels: fluent and
  wrong), a wrong chat template (chat turns only), and position-dependent changes that only
  long prompts show: the rotary base at 0.5, 2 and 0.8 times the model's, rotary positions
  scaled by 0.9, a context window of 1024 tokens where the Service is used with 2048;
- quantization: an F16 reference against the shipped Q4_1 (the F16 file is that Q4_1
  dequantized, so this pair has no quantization error in it) and against Q8_0 and Q4_0
  quantized from the F16 by llama.cpp's own quantizer (a real quantization error), with
  F16 benign kernel variants and harmful ones beside them: the bands by kind of change
  (`ParityTolerances.change`) come from this table.

For every check it prints each variant's figure, the benign and harmful ranges, and the
margin between them (the mildest harmful figure over the worst benign one), then the verdict
of the gate's default tolerances for each variant and the rule that decided it.

    uv run python benchmarks/parity_separation.py [--reference q4_1|f16|both] [--top-k 8]
        [--no-long-context] [--parallel N] [--record benchmarks/results/parity_separation.json]

docs/performance.md's "Parity tolerances from evidence" is the rendering of that record.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from benchmarks.record import load_1m, provenance, write
from benchmarks.schemas import ParityCase, ParitySeparationRecord
from benchmarks.tables.parity import tabulate
from gates.common.prompts import load_prompts
from gates.common.settings import ParityTolerances
from gates.parity.gate import ParityResult, collect_candidate, judge
from gates.parity.golden import record_golden_async
from gates.parity.golden_format import Golden, GoldenSettings, LongContextSettings
from gates.parity.long_context import LongContextFigures
from sandbox.engines.llamacpp import LlamaServer, ServerOptions, Variant

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "manifests" / "prompts" / "smollm2.jsonl"
REFERENCE = REPO / "manifests" / "prompts" / "reference-long.txt"
CONTEXT_TOKENS = 2000  # within the servers' default 2048-token window


@dataclass(frozen=True)
class Case:
    name: str
    kind: Literal["benign", "harmful", "quantization"]
    variant: Variant
    options: ServerOptions = field(default_factory=ServerOptions)


Q4_CASES = [
    Case("same settings, restarted", "benign", "q4_1"),
    Case("f32 KV cache", "benign", "q4_1", ServerOptions(type_k="f32", type_v="f32")),
    Case("flash attention", "benign", "q4_1", ServerOptions(flash_attn=True)),
    Case("2 threads", "benign", "q4_1", ServerOptions(n_threads=2)),
    Case("prompt batch 8", "benign", "q4_1", ServerOptions(n_batch=8)),
    Case("zeroed key band", "harmful", "q4_1-zkb"),
    Case("wrong chat template", "harmful", "q4_1", ServerOptions(chat_format="llama-2")),
    Case("rotary base x0.5", "harmful", "q4_1", ServerOptions(rope_freq_base=50000.0)),
    Case("rotary base x2", "harmful", "q4_1", ServerOptions(rope_freq_base=200000.0)),
    Case("rotary base x0.8", "harmful", "q4_1", ServerOptions(rope_freq_base=80000.0)),
    Case("rotary scale 0.9", "harmful", "q4_1", ServerOptions(rope_freq_scale=0.9)),
    Case("context 1024", "harmful", "q4_1", ServerOptions(n_ctx=1024)),
]
F16_CASES = [
    Case("f16: restarted", "benign", "f16"),
    Case("f16: flash attention", "benign", "f16", ServerOptions(flash_attn=True)),
    Case("f16: f32 KV cache", "benign", "f16", ServerOptions(type_k="f32", type_v="f32")),
    Case("f16 -> q8_0 (quantized)", "quantization", "q8_0"),
    Case("f16 -> q4_0 (quantized)", "quantization", "q4_0"),
    Case("f16 -> q4_1 (dequantized pair)", "quantization", "q4_1"),
    Case("f16: zeroed key band", "harmful", "f16-zkb"),
    Case("f16 -> q4_1 zeroed key band", "harmful", "q4_1-zkb"),
]


@dataclass
class Row:
    case: Case
    result: ParityResult  # under the default tolerances
    reference: Variant = "q4_1"
    seconds: float = 0.0
    load_1m: float = 0.0

    def record(self) -> ParityCase:
        """The row as the record keeps it (and the tables show it)."""
        return ParityCase(
            name=self.case.name,
            kind=self.case.kind,
            reference=self.reference,
            verdict=self.result.verdict,
            finding=(self.result.evidence or [self.result.reason])[0],
            figures={check: self.figure(check) for check in CHECKS},
            seconds=round(self.seconds, 1),
            load_1m=self.load_1m,
        )

    def figure(self, name: str) -> float | None:
        f = self.result.figures
        tf, lc = f.teacher_forced, f.long_context
        completions = [p for p in f.prompts if p.api == "completions"]
        chats = [p for p in f.prompts if p.api == "chat"]
        values: dict[str, float | None] = {
            "tf mean KL": tf.kl_mean if tf else None,
            "tf p99 KL": tf.kl_p99 if tf else None,
            "tf top-1 disagreement": 1 - tf.top_token_agreement if tf else None,
            "tf |log ppl ratio|": abs(math.log(tf.perplexity_ratio))
            if tf and tf.perplexity_ratio
            else None,
            "tf |log ppl| interval bound": max(abs(f.perplexity.low), abs(f.perplexity.high))
            if f.perplexity
            else None,
            "greedy tokens differing": 1 - f.n_tokens_identical / max(f.n_tokens_golden, 1),
            "prompts off top-k at divergence": _share(
                [p for p in completions if p.divergence],
                lambda p: not p.divergence.in_each_others_top_k,
            ),
            "max gap at divergence (nats)": max(
                (gap for p in f.prompts if p.divergence and (gap := _max_gap(p)) is not None),
                default=0.0,
            ),
            "chat prompts with another template": float(sum(p.template_differs for p in chats)),
            "long: last quarter mean KL": lc.buckets[-1].kl_mean if lc and lc.buckets else None,
            "long: last / first quarter": _late_to_early(lc) if lc else None,
            "long: trend rho": lc.trend_rho if lc else None,
            "long: prompts refused": float(bool(lc.refused)) if lc else None,
        }
        return values[name]


CHECKS = [
    "tf mean KL",
    "tf p99 KL",
    "tf top-1 disagreement",
    "tf |log ppl ratio|",
    "tf |log ppl| interval bound",
    "greedy tokens differing",
    "prompts off top-k at divergence",
    "max gap at divergence (nats)",
    "chat prompts with another template",
    "long: last quarter mean KL",
    "long: last / first quarter",
    "long: trend rho",
    "long: prompts refused",
]


def _share(items: list, predicate) -> float:  # type: ignore[no-untyped-def]
    return sum(1 for i in items if predicate(i)) / len(items) if items else 0.0


def _late_to_early(figures: LongContextFigures) -> float | None:
    """The longest quarter's mean KL over the shortest's (the gate reports their difference)."""
    buckets = figures.buckets
    if len(buckets) < 2 or buckets[0].kl_mean <= 0:
        return None
    return buckets[-1].kl_mean / buckets[0].kl_mean


def _max_gap(p) -> float | None:  # type: ignore[no-untyped-def]
    gaps = [g for g in (p.divergence.golden_gap, p.divergence.candidate_gap) if g is not None]
    return max(gaps) if gaps else None


async def record(server: LlamaServer, top_k: int, *, long_context: bool) -> Golden:
    settings = GoldenSettings(
        top_k=top_k,
        prompts=load_prompts(PROMPTS),
        reference_text=REFERENCE.read_text(),
        probe_prompt=REFERENCE.read_text(),
        long_context=LongContextSettings(tokens=CONTEXT_TOKENS) if long_context else None,
    )
    return await record_golden_async(server.url, model_id=None, settings=settings)


def golden_from(reference: Variant, logs: Path, top_k: int, *, long_context: bool) -> Golden:
    with LlamaServer(reference, ServerOptions(), log_dir=logs) as server:
        start = time.perf_counter()
        golden = asyncio.run(record(server, top_k, long_context=long_context))
    print(
        f"golden from {reference}: {len(golden.outputs.reference or [])} teacher-forced "
        f"positions, {sum(len(c.steps) for c in golden.outputs.completions)} greedy tokens "
        f"({time.perf_counter() - start:.1f} s)",
        flush=True,
    )
    return golden


def run_case(case: Case, reference: Variant, golden: Golden, logs: Path) -> Row:
    """One candidate server against the golden; each request at concurrency 1 (its own
    server), several candidates side by side in threads."""
    with LlamaServer(case.variant, case.options, log_dir=logs) as server:
        start = time.perf_counter()
        candidate = asyncio.run(collect_candidate(server.url, golden, model_id=golden.model_id))
    result = judge(golden, candidate, ParityTolerances())
    seconds = time.perf_counter() - start
    print(
        f"  {case.name:<28} {case.kind:<12} verdict {result.verdict:<10} ({seconds:.1f} s)",
        flush=True,
    )
    return Row(case, result, reference, seconds, load_1m())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", choices=["q4_1", "f16", "both"], default="both")
    parser.add_argument("--top-k", type=int, default=8, help="logprobs per position")
    parser.add_argument("--parallel", type=int, default=1, help="servers run side by side")
    parser.add_argument(
        "--no-long-context",
        action="store_true",
        help="skip the 2,000-token probes (minutes a side; the position-dependent cases "
        "then show only the short checks)",
    )
    parser.add_argument("--record", type=Path, help="write the figures and their provenance")
    args = parser.parse_args()
    source = provenance()
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f}")
    references: list[Variant] = ["q4_1", "f16"] if args.reference == "both" else [args.reference]
    long_context = not args.no_long_context
    with (
        tempfile.TemporaryDirectory(prefix="parity-bench-") as tmp,
        ThreadPoolExecutor(args.parallel) as pool,
    ):
        logs = Path(tmp)
        goldens = dict(
            zip(
                references,
                pool.map(
                    lambda v: golden_from(v, logs, args.top_k, long_context=long_context),
                    references,
                ),
                strict=True,
            )
        )
        jobs: list[tuple[Case, Variant]] = [(c, "q4_1") for c in Q4_CASES if "q4_1" in goldens]
        jobs += [(c, "f16") for c in F16_CASES if "f16" in goldens]
        rows = list(pool.map(lambda job: run_case(job[0], job[1], goldens[job[1]], logs), jobs))
    cases = [row.record() for row in rows]
    for reference in goldens:
        chosen = [c for c in cases if c.reference == reference]
        print("\n" + tabulate(f"{reference} reference", chosen, CHECKS))
    load = os.getloadavg()
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f}")
    if args.record:
        record = ParitySeparationRecord(
            provenance=source, top_k=args.top_k, long_context=long_context, cases=cases
        )
        write(args.record, record)


if __name__ == "__main__":
    main()
