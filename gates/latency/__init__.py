"""The latency gate: TTFT, TPOT, ITL and throughput of the candidate under closed-loop load,
against the live baseline and absolute SLOs. Its run (`gate`: interleaved rounds per
concurrency level), the closed-loop load over the `gates.http` transports (`load`), the
per-request metrics (`metrics`) and one side's figures at one level (`cell`), the decision:
a regression per metric (`compare`), what a level can and cannot tell (`verdict`) and the
SLOs (`slo`); its figures and markdown (`report`) and pictures (`plot`). It imports neither
the parity nor the task gate.
"""
