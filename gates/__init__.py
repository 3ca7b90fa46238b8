"""Gates that decide whether a candidate model server may take over a Service.

- `gates.smoke.run_smoke`: the server lists the expected model and answers in time.
- `gates.parity.run_parity`: same greedy tokens, logprobs, probes and heads as a golden file
  recorded from the reference (`gates.golden.record_golden`).
- `gates.task.run_task`: the candidate still does the job: a suite of checked cases on both
  sides (code checks only in an isolated subprocess), a paired test against a margin.
- `gates.latency.run_latency`: TTFT/TPOT/ITL/throughput under closed-loop load, against the
  live baseline (interleaved rounds, Mann-Whitney U plus a bootstrap interval) and SLOs.

Each returns a `gates.result.GateResult` (verdict, reason, typed figures, evidence, markdown).
This package imports nothing from prefect, kubernetes or flows, so it runs alone.
"""
