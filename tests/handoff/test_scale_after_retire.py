"""A target that fits only once the old workload is gone: the candidate is warmed and
gated at its preview size beside the live pods, the Service moves, the old workload
retires, and only then does the candidate scale to its target. The ledger's phases
still run forward (swapped, scaled, retired, done)."""

from __future__ import annotations

from pathlib import Path

from flows.kube.client import Kube
from flows.ledger import parse_ledger
from sandbox.proxy import address_of
from sandbox.seed import CLIENT_API
from sandbox.state import SandboxState
from sandbox.traffic import ClientLoad
from tests.world import run_handoff, service, spec_in


def test_the_candidate_reaches_a_target_that_fits_only_after_retirement(
    sandbox: SandboxState, kube: Kube, seeded: str, handoff_env: dict[str, str], tmp_path: Path
) -> None:
    # One GPU is free beside the live pod: the preview (1) fits, the target (2) does not.
    # The latency gate is not under test here. It passes only what it shows within every
    # margin, and on a loaded 2-core machine an identical (or faster) candidate's p99 ITL
    # interval reached 1.42 at 1 stream and 3.7 at 16 (TPOT 1.10 at 16): wider margins let
    # the handoff be shown; tests/gates/latency/ test the gate's own defaults.
    margins = {"tpot": 1.25, "itl_p99": 5.0, "throughput": 0.8}
    spec_file = spec_in(
        seeded,
        "clef-candle",
        tmp_path,
        candidate={"replicas": 2},
        gates={"parity": None, "latency": {"levels": [1], "margins": margins, "rounds": 3}},
    )
    url = "http://" + address_of(sandbox.run_dir, seeded, "clef-serve", 80)
    with ClientLoad(url, api=CLIENT_API["clef-serve"], streams=4) as load:
        result = run_handoff(spec_file, handoff_env, "--auto-approve")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert "scale-up follows retirement" in out, out[-3000:]
    assert load.succeeded > 0 and load.failed == [], load.failed[:3]
    candidate = kube.apps.read_namespaced_deployment("clef-candle", seeded)
    assert candidate.spec.replicas == 2, candidate.spec.replicas
    assert candidate.status.ready_replicas == 2, candidate.status
    assert kube.apps.read_namespaced_deployment("clef-serve", seeded).spec.replicas == 0
    ledger = parse_ledger(service(kube, seeded, "clef-serve").metadata.annotations)
    assert ledger is not None and ledger.phase == "done"
