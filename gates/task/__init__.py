"""The task gate: does the candidate still do the job its clients send? Its run (`gate`:
both sides answer the suite, a paired test against a margin), the suite and its cases
(`suite`), asking a server and scoring its answers (`collect`, `check`), a `code` case's
tests split into probes and expectations (`tests`), the sandbox that runs untrusted checks
(`sandbox`, with its bubblewrap command line `bwrap`, its syscall filter `seccomp` and the
script it runs inside, `harness`), the paired statistics (`stats`) and what a suite of its
size can show (`power`), golden scores for an in-place handoff (`golden`), and its figures
and markdown (`report`). It imports neither the parity nor the latency gate.
"""
