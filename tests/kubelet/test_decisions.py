"""The kubelet's pure decisions match the real kubelet's: restart back-off (immediate,
then doubling to the cap, reset after a long run), pod phase from container states,
Go-style durations in messages, condition transition times that move only on change,
and which model-server command (profile, faults) a container gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.client import V1Container, V1PodSpec, V1ResourceRequirements

from sandbox.cluster import load_cluster
from sandbox.kubelet.backoff import Backoff
from sandbox.kubelet.command import ContainerConfigError, server_argv
from sandbox.kubelet.images import PulledImage
from sandbox.kubelet.status import Conditions, go_duration, pod_phase
from sandbox.modelserver.surface import CANDLE_VLLM_ROUTES
from sandbox.simbuild import SimBuild

ROOT = Path(__file__).resolve().parents[2]


def test_backoff_is_immediate_then_doubles_to_the_cap() -> None:
    backoff = Backoff(initial_s=10, cap_s=40)
    waits, now = [], 0.0
    for _ in range(6):
        now += 1  # the container runs one second, then exits
        restart = backoff.retry_at(now)
        waits.append(restart - now)
        backoff.record_attempt(restart)
        now = restart
    assert waits == [0, 10, 20, 40, 40, 40]


def test_backoff_resets_after_a_long_run() -> None:
    backoff = Backoff(initial_s=10, cap_s=40)
    backoff.record_attempt(0)
    backoff.record_attempt(1)
    assert backoff.retry_at(2) == 2 + 20
    assert backoff.retry_at(1 + 81) == 82  # ran longer than twice the cap


def test_scaled_backoff_has_a_floor() -> None:
    assert Backoff.scaled(0.05).initial_s == 0.5 and Backoff.scaled(0.05).cap_s == 15
    assert Backoff.scaled(0.001).initial_s == 0.5


RUNNING = {"state": {"running": {}}}
WAITING = {"state": {"waiting": {"reason": "ContainerCreating"}}}
CRASHED = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {}}}
DONE_OK = {"state": {"terminated": {"exitCode": 0}}}
DONE_BAD = {"state": {"terminated": {"exitCode": 1}}}


@pytest.mark.parametrize(
    ("containers", "policy", "phase"),
    [
        ([WAITING], "Always", "Pending"),
        ([RUNNING], "Always", "Running"),
        ([RUNNING, WAITING], "Always", "Pending"),
        ([CRASHED], "Always", "Running"),
        ([DONE_OK], "Never", "Succeeded"),
        ([DONE_BAD], "Never", "Failed"),
        ([DONE_BAD], "OnFailure", "Running"),
        ([DONE_BAD], "Always", "Running"),
    ],
)
def test_pod_phase(containers: list[dict], policy: str, phase: str) -> None:
    assert pod_phase(containers, policy) == phase


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.5, "500ms"), (1, "1s"), (2.5, "2.5s"), (15, "15s"), (300, "5m0s")]
)
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_condition_transition_time_moves_only_on_change() -> None:
    old = {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    conditions = Conditions([old])
    conditions.set("Ready", False, reason="ContainersNotReady")
    assert conditions.get("Ready")["lastTransitionTime"] == old["lastTransitionTime"]
    conditions.set("Ready", True)
    assert conditions.get("Ready")["lastTransitionTime"] != old["lastTransitionTime"]


def _argv(
    server: str | None,
    args: list[str],
    *,
    gpus: int = 0,
    runtime: str | None = None,
    faults: tuple[str, ...] = (),
) -> list[str]:
    build = SimBuild(server=server, faults=faults) if server else None
    image = PulledImage(image="r/x:1", image_id="docker-pullable://r/x@sha256:0", build=build)
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
    container = V1Container(
        name="c", image="r/x:1", args=args, resources=V1ResourceRequirements(limits=limits)
    )
    spec = V1PodSpec(containers=[container], runtime_class_name=runtime)
    return server_argv(
        cluster=load_cluster(), spec=spec, container=container, image=image, port=1234
    )


def _flag(argv: list[str], name: str) -> list[str]:
    return [argv[i + 1] for i, word in enumerate(argv) if word == name]


@pytest.mark.parametrize(
    ("server", "args", "profile"),
    [
        ("candle-vllm", ["--w", "/mnt/models/coder-14b-fp16"], "fp16-14b-tp2"),
        ("candle-vllm", ["--w", "/mnt/models/clef-flash"], "clef-flash-candle"),
        ("clef-serve", ["serve", "clef-flash"], "clef-flash-pytorch"),
        ("vllm", ["--model", "Qwen/Qwen3-Coder-30B-A3B-Instruct-GPTQ"], "gptq-30b-a3b-tp1"),
        (None, [], "cadence"),
    ],
)
def test_profile_from_server_label_and_weights(
    server: str | None, args: list[str], profile: str
) -> None:
    assert _flag(_argv(server, args), "--profile") == [profile]


def test_faults_from_image_and_missing_gpu_runtime() -> None:
    coder = ["--w", "coder-14b-fp16"]
    assert _flag(_argv("candle-vllm", coder, gpus=2, runtime="nvidia"), "--fault") == []
    assert _flag(_argv("candle-vllm", coder, gpus=2), "--fault") == ["crash_on_start"]
    faulty = _argv(
        "candle-vllm", ["--w", "clef-flash"], gpus=1, runtime="nvidia", faults=("zero_key_band",)
    )
    assert _flag(faulty, "--fault") == ["zero_key_band"]


def test_served_model_name_overrides_the_profile_id() -> None:
    argv = _argv("vllm", ["--model", "x-gptq", "--served-model-name", "coder"])
    assert _flag(argv, "--model-id") == ["coder"]


def test_vllms_shutdown_timeout_reaches_the_server_in_real_seconds() -> None:
    model = ["--model", "x-gptq"]
    assert _flag(_argv("vllm", [*model, "--shutdown-timeout", "0"]), "--shutdown-timeout-s") == [
        "0.0"
    ]
    assert _flag(_argv("vllm", [*model, "--shutdown-timeout=45"]), "--shutdown-timeout-s") == [
        "45.0"
    ]
    assert _flag(_argv("vllm", model), "--shutdown-timeout-s") == []  # drains until done
    with pytest.raises(ContainerConfigError, match="--shutdown-timeout 'soon': expected seconds"):
        _argv("vllm", [*model, "--shutdown-timeout", "soon"])


def test_unknown_server_label_is_a_config_error() -> None:
    with pytest.raises(ContainerConfigError, match="models table"):
        _argv("tgi", ["--model", "x"])


def test_cold_start_is_scaled_by_the_time_scale() -> None:
    argv = _argv("clef-serve", ["--model", "/mnt/models/clef-flash"], gpus=1, runtime="nvidia")
    assert _flag(argv, "--fault") == ["slow_start"]
    assert float(_flag(argv, "--slow-start-s")[0]) == 240 * load_cluster().time_scale


def test_candle_vllm_clef_runs_chat_only_and_loads_before_its_port_opens() -> None:
    argv = _argv("candle-vllm", ["--w", "/mnt/models/clef-flash"], gpus=1, runtime="nvidia")
    assert _flag(argv, "--surface") == ["candle-vllm"]
    assert float(_flag(argv, "--load-s")[0]) > 0 and _flag(argv, "--fault") == []


@pytest.mark.parametrize("weights", ["coder-14b-fp16", "Qwen3-Coder-30B-A3B-GPTQ"])
def test_candle_vllm_coder_servers_run_chat_only(weights: str) -> None:
    argv = _argv("candle-vllm", ["--w", f"/mnt/models/{weights}"], gpus=1, runtime="nvidia")
    assert _flag(argv, "--surface") == ["candle-vllm"]


CANDLE_VLLM_MANIFESTS = [
    "clef-candle.yaml",
    "coder-14b-fp16.yaml",
    "before/coder-gptq-30b-a3b.yaml",
]


@pytest.mark.parametrize("path", CANDLE_VLLM_MANIFESTS)
def test_candle_vllm_deployments_probe_only_what_candle_vllm_serves(path: str) -> None:
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving" / path).read_text())
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    assert "candle-vllm" in container["image"]
    probes = [container.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe")]
    assert any(probes)
    for probe in filter(None, probes):
        assert "tcpSocket" in probe or probe["httpGet"]["path"] in CANDLE_VLLM_ROUTES, probe


def test_clef_candle_waits_for_its_load() -> None:
    manifest = yaml.safe_load((ROOT / "manifests/llm-serving/clef-candle.yaml").read_text())
    [container] = manifest["spec"]["template"]["spec"]["containers"]
    startup = container["startupProbe"]
    rule = load_cluster().model_for("candle-vllm", "--w /mnt/models/clef-flash")
    assert rule is not None and rule.cold_start_s > 0
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2 * rule.cold_start_s
