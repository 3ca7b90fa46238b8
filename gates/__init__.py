"""Gates that decide whether a candidate model server may take over a Service.

- `gates.smoke.run_smoke`: the server lists the expected model and answers in time.
- `gates.parity.gate.run_parity`: same greedy tokens, logprobs, probes and heads as a golden
  file recorded from the reference (`gates.parity.golden.record_golden`).
- `gates.task.gate.run_task`: the candidate still does the job: a suite of checked cases on
  both sides (code checks only in an isolated subprocess), a paired test against a margin.
- `gates.latency.gate.run_latency`: TTFT/TPOT/ITL/throughput under closed-loop load, against
  the live baseline (interleaved rounds, Mann-Whitney U plus a bootstrap interval) and SLOs.

Each returns a `gates.common.result.GateResult` (verdict, reason, typed figures, evidence,
markdown). One room per gate (`parity`, `latency`, `task`: its run, its decision, its report
and pictures), beside `http` (how any gate talks to a model server) and `common` (what more
than one gate needs); the rooms import neither one another nor back up from `http` and
`common`. This package imports nothing from prefect, kubernetes or flows, so it runs alone.
"""
