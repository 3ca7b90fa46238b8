"""The parity gate: does the candidate answer as the golden reference did? Its run
(`gate`: probe, replay the golden prompts, judge), the pure comparisons that decide it
(`compare`: greedy identity, near-ties, KL and top-k overlap, probes and heads), what it
collects from a server (`collect`), the golden file's format (`golden_format`) and its
recording from a reference server (`golden`, `handoff golden record`), and its figures,
findings and markdown (`report`) and picture (`plot`). It imports neither the latency nor
the task gate.
"""
