"""A scale is decided from a read and written under that read's resourceVersion: a
person's edit landing between the two (here through the run's fence, which every write
passes right before it is sent) is met with a 409, read again and decided again. A
count the person set is never overwritten; an edit that leaves the count alone, or that
already reached the target, lets the scale end as it should."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from flows.kube import read, write
from flows.kube.client import Kube, NotFound
from tests.lease.test_lease import admin, ns, plane

__all__ = ["admin", "ns", "plane"]  # the control plane fixtures, shared
pytestmark = pytest.mark.timeout(300)
NAME = "serve"


def _deployment(admin: Kube, ns: str, replicas: int) -> None:
    labels = {"app": "serve"}
    admin.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": NAME},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "s", "image": "s"}]},
                },
            },
        },
    )


def _edits_once(edit: Callable[[], Any]) -> Callable[[], None]:
    """A fence that lets every write through and makes the person's edit the first time
    it is asked: after the scale's read, before its write reaches the apiserver."""
    made: list[bool] = []

    def fence() -> None:
        if not made:
            made.append(True)
            edit()

    return fence


def _scaled_by_a_person(admin: Kube, ns: str, replicas: int) -> Callable[[], Any]:
    body = {"spec": {"replicas": replicas}}
    return lambda: admin.apps.patch_namespaced_deployment_scale(NAME, ns, body)


def _annotated_by_a_person(admin: Kube, ns: str) -> Callable[[], Any]:
    body = {"metadata": {"annotations": {"note": "a person's"}}}
    return lambda: admin.apps.patch_namespaced_deployment(NAME, ns, body)


def test_a_count_a_person_set_between_the_read_and_the_write_is_kept(admin: Kube, ns: str) -> None:
    _deployment(admin, ns, replicas=2)
    run = dataclasses.replace(admin, fence=_edits_once(_scaled_by_a_person(admin, ns, 3)))
    with pytest.raises(write.ReplicasEdited, match="expected 0 or 2 replicas") as stopped:
        write.scale_deployment(run, ns, NAME, 0, expected={2})
    assert f"Deployment {ns}/{NAME}" in str(stopped.value) and "found 3" in str(stopped.value)
    assert stopped.value.object == f"Deployment {NAME}"
    found = read.read_deployment(admin, ns, NAME)
    assert found is not None and found.replicas == 3


@pytest.mark.parametrize("edit", ["annotation", "the target count"])
def test_an_edit_that_leaves_the_scale_right_lets_it_end(admin: Kube, ns: str, edit: str) -> None:
    _deployment(admin, ns, replicas=2)
    person = (
        _annotated_by_a_person(admin, ns)
        if edit == "annotation"
        else _scaled_by_a_person(admin, ns, 0)
    )
    write.scale_deployment(
        dataclasses.replace(admin, fence=_edits_once(person)), ns, NAME, 0, expected={2}
    )
    found = read.read_deployment(admin, ns, NAME)
    assert found is not None and found.replicas == 0
    if edit == "annotation":  # read again, written again over the new resourceVersion
        assert found.annotations.get("note") == "a person's"


def test_a_count_other_than_the_one_decided_from_is_not_written(admin: Kube, ns: str) -> None:
    _deployment(admin, ns, replicas=3)  # scaled by a person before the read
    with pytest.raises(write.ReplicasEdited, match="found 3"):
        write.scale_deployment(admin, ns, NAME, 0, expected={2})
    found = read.read_deployment(admin, ns, NAME)
    assert found is not None and found.replicas == 3
    with pytest.raises(NotFound, match="not found, so not scaled"):
        write.scale_deployment(admin, ns, "absent", 0, expected={2})
