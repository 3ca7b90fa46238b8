"""List-then-watch one resource across all namespaces with the official client, in a
daemon thread, handing every change to a callback (the proxy posts it to its loop).

A list delivers the complete current set (`on_list`), then watch events follow from
its resourceVersion (`on_event`). An expired resourceVersion (410 Gone) or a broken
connection leads to a fresh list after RETRY_S, so a consumer always converges.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
RETRY_S = 1.0
WATCH_TIMEOUT_S = 300
SLICE_GROUP = "discovery.k8s.io"

Obj = dict[str, Any]
ListFunc = Callable[..., Any]


class Informer:
    def __init__(
        self,
        list_func: ListFunc,
        *,
        on_list: Callable[[list[Obj]], None],
        on_event: Callable[[str, Obj], None],
    ) -> None:
        self._list, self._on_list, self._on_event = list_func, on_list, on_event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=list_func.__name__, daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # the thread leaves at its next event or watch timeout

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._list_and_watch()
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("%s failed: %s %s", self._list.__name__, exc.status, exc.reason)
            except Exception as exc:  # connection trouble: relist after a pause
                log.warning("%s failed: %r", self._list.__name__, exc)
            self._stop.wait(RETRY_S)

    def _list_and_watch(self) -> None:
        response = self._list(_preload_content=False)
        listing = json.loads(response.data)
        self._on_list(listing.get("items") or [])
        version = listing["metadata"]["resourceVersion"]
        stream = watch.Watch()
        while not self._stop.is_set():
            for event in stream.stream(
                self._list, resource_version=version, timeout_seconds=WATCH_TIMEOUT_S
            ):
                self._on_event(event["type"], event["raw_object"])
                if self._stop.is_set():
                    return
            version = stream.resource_version or version


def api_client(kubeconfig: str) -> client.ApiClient:
    from kubernetes import config

    api: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)  # untyped
    return api


def endpoint_slices_lister(api: client.ApiClient) -> ListFunc:
    """List (and watch) EndpointSlices in every namespace, in the version the server
    prefers (v1 from 1.21, v1beta1 on 1.20), found by discovery as kube-proxy does."""
    groups = client.ApisApi(api).get_api_versions().groups or []
    group = next((g for g in groups if g.name == SLICE_GROUP), None)
    if group is None:
        raise RuntimeError(f"the API server serves no {SLICE_GROUP} EndpointSlices")
    if group.preferred_version is None:
        raise RuntimeError(f"the API server names no preferred version of {SLICE_GROUP}")
    version = group.preferred_version.version
    objects = client.CustomObjectsApi(api)

    def list_endpoint_slices(**params: Any) -> Any:
        return objects.list_cluster_custom_object(SLICE_GROUP, version, "endpointslices", **params)

    return list_endpoint_slices
