"""The schedulers decide token deadlines from the profile alone: continuous batching admits
at most max_num_seqs, prefills admitted prompts together, then decodes at the batch's step
time on an absolute timeline; the cadence policy spaces each stream by exactly one interval."""

from __future__ import annotations

import itertools
import time

import pytest

from sandbox.modelserver.engine.clock import Clock
from sandbox.modelserver.engine.schedule import RESYNC_NS, Cadence, ContinuousBatching, Step
from sandbox.modelserver.engine.sequence import GenRequest, Sequence
from sandbox.modelserver.lm.sampling import SamplingParams
from sandbox.modelserver.profiles import PROFILES

MS = 1_000_000


def seq(*, prompt_len: int = 10, at_ms: float = 0.0) -> Sequence:
    request = GenRequest(
        prompt=(65,) * prompt_len,
        max_tokens=8,
        sampling=SamplingParams(0.0, True, 0),
        seed=None,
        prompt_logprobs=None,
        submitted_ns=int(at_ms * MS),
    )
    return Sequence(request, lambda event: None, granted=8)


def batching(profile: str = "fp16-14b-tp2", **changes: object) -> ContinuousBatching:
    return ContinuousBatching(PROFILES[profile].model_copy(update=changes), scale=1.0)


@pytest.mark.parametrize(
    ("profile", "batch", "step_ms"),
    [
        ("gptq-30b-a3b-tp1", 1, 17.6),
        ("gptq-30b-a3b-tp1", 16, 71.5),
        ("fp16-14b-tp2", 1, 27.9),
        ("fp16-14b-tp2", 16, 39.7),
        ("fp16-14b-tp2", 31, 39.7 + 15 * (39.7 - 27.9) / 15),
    ],
)
def test_step_time_is_linear_between_the_measured_points(
    profile: str, batch: int, step_ms: float
) -> None:
    assert PROFILES[profile].step_ms(batch) == pytest.approx(step_ms)


@pytest.mark.parametrize(("streams", "mean_ttft_ms"), [(1, 275.0), (16, 1090.0)])
def test_14b_prefill_reproduces_the_seed_ttft(streams: int, mean_ttft_ms: float) -> None:
    profile = PROFILES["fp16-14b-tp2"]
    alone = profile.prefill_ms(128)
    rest = alone + profile.prefill_ms(128 * (streams - 1)) if streams > 1 else alone
    assert (alone + (streams - 1) * rest) / streams == pytest.approx(mean_ttft_ms)


def test_admitted_prompts_share_one_prefill_step_then_decode_together() -> None:
    policy = batching()
    seqs = [seq(prompt_len=20) for _ in range(3)]
    for s in seqs:
        policy.add(s)
    prefill = policy.plan(now_ns=0)
    assert prefill is not None and prefill.prefill and prefill.seqs == tuple(seqs)
    assert prefill.deadline_ns == round(policy.profile.prefill_ms(60) * MS)
    policy.done(prefill, ended_ns=prefill.deadline_ns)
    decode = policy.plan(now_ns=prefill.deadline_ns)
    assert decode is not None and not decode.prefill and decode.seqs == tuple(seqs)
    assert decode.deadline_ns - prefill.deadline_ns == round(policy.profile.step_ms(3) * MS)


def test_batch_is_capped_and_the_rest_queue_in_arrival_order() -> None:
    policy = batching(max_num_seqs=2)
    seqs = [seq() for _ in range(3)]
    for s in seqs:
        policy.add(s)
    first = policy.plan(now_ns=0)
    assert first is not None and first.seqs == tuple(seqs[:2])
    policy.done(first, ended_ns=first.deadline_ns)
    seqs[0].finished = True
    second = policy.plan(now_ns=first.deadline_ns)
    assert second is not None and second.prefill and second.seqs == (seqs[2],)


def test_each_step_is_due_a_step_time_after_the_previous_one_ended() -> None:
    policy = batching()
    policy.add(seq())
    step = policy.plan(now_ns=0)
    assert step is not None
    deadlines = [step.deadline_ns]
    for _ in range(5):
        policy.done(step, ended_ns=step.deadline_ns)
        step = policy.plan(now_ns=step.deadline_ns + 3 * MS)  # the clock noticed 3 ms late
        assert step is not None
        deadlines.append(step.deadline_ns)
    gaps = {b - a for a, b in itertools.pairwise(deadlines[1:])}  # after the prefill
    assert gaps == {round(policy.profile.step_ms(1) * MS)}


@pytest.mark.parametrize(
    ("waited", "late_ns", "ended"),
    [
        (False, 3 * MS, "deadline"),  # slept late: no drift
        (True, 3 * MS, "now"),  # waited for the compute process: the step really ended later
        (False, RESYNC_NS + MS, "now"),  # a hiccup: restart rather than burst to catch up
    ],
)
def test_when_a_step_counts_as_ended(waited: bool, late_ns: int, ended: str) -> None:
    step = Step(time.monotonic_ns() - late_ns, (), prefill=False)
    before = time.monotonic_ns()
    got = Clock._ended_ns(step, waited)
    assert got == step.deadline_ns if ended == "deadline" else got >= before


def test_an_idle_engine_starts_the_step_when_the_request_arrived() -> None:
    policy = batching()
    policy.add(seq(at_ms=100.0))
    step = policy.plan(now_ns=int(100.4 * MS))  # the clock noticed 0.4 ms later
    assert step is not None
    assert step.deadline_ns == int(100 * MS) + round(policy.profile.prefill_ms(10) * MS)


def test_slowdown_and_time_scale_multiply_durations() -> None:
    policy = ContinuousBatching(PROFILES["gptq-30b-a3b-tp1"], scale=1.2)
    policy.add(seq())
    step = policy.plan(now_ns=0)
    assert step is not None
    assert step.deadline_ns == round(PROFILES["gptq-30b-a3b-tp1"].prefill_ms(10) * 1.2 * MS)


def test_cadence_gives_each_stream_its_own_exact_interval() -> None:
    policy = Cadence(PROFILES["cadence"], scale=1.0)
    a, b = seq(at_ms=0.0), seq(at_ms=7.0)
    policy.add(a)
    policy.add(b)
    dues: dict[int, list[int]] = {a.id: [], b.id: []}
    for _ in range(6):
        step = policy.plan(now_ns=0)
        assert step is not None
        for s in step.seqs:
            dues[s.id].append(step.deadline_ns)
        policy.done(step, ended_ns=step.deadline_ns)
    assert dues[a.id] == [25 * MS, 50 * MS, 75 * MS]
    assert dues[b.id] == [32 * MS, 57 * MS, 82 * MS]


def test_cadence_drops_finished_streams() -> None:
    policy = Cadence(PROFILES["cadence"], scale=1.0)
    s = seq()
    policy.add(s)
    s.aborted = True
    assert policy.plan(now_ns=0) is None
