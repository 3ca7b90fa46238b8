"""Connect to a cluster and map its API errors to the handoff's error hierarchy.

Outside a cluster the kubeconfig comes from --kubeconfig, $KUBECONFIG or
~/.kube/config; inside one, from the pod's service account.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from flows import signals
from flows.errors import PermanentError, TransientError
from retrypolicy.retry import Retry, policy, retry_after, with_retries

FIELD_MANAGER = "handoff"


def as_body(manifest: Mapping[str, Any]) -> Any:
    """A plain manifest as a request body: the client sends a dict as it is, though it
    annotates its request bodies with its model classes only."""
    return manifest


class Conflict(TransientError):
    """The object changed since it was read (409): read it again and retry."""


class KubeUnavailable(TransientError):
    """The API server could not be reached or answered 5xx/429."""


class KubeError(PermanentError):
    """The API server refused a request; retrying the same request will not help."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(KubeError):
    """The object does not exist."""


class Forbidden(KubeError):
    """RBAC denies the request to the identity the flow runs as."""


# A fence (Kube.fence) raises when the run may no longer write; else it gives the
# time.monotonic() by which a write must be done (None: no such bound).
Fence = Callable[[], float | None]
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class RetryingApiClient(client.ApiClient):
    """Every request of every API group passes here: 429, 5xx and no answer are retried
    by the one policy (retrypolicy/retry.py), bounded by the request's own timeout if it has
    one. Writes are safe to repeat: each is idempotent or guarded by a resourceVersion.
    urllib3's own retries (it repeats a 429 or 503 with Retry-After, silently) are off.

    A fenced client (`fenced(fence)`, what a Kube with a fence uses) bounds each write
    (not a dry-run, not a Lease's own request) by its fence too: every try passes the
    fence first, no try is sent after the fence's deadline and none waits for an answer
    past it, and the retries stop there; at the deadline the fence is asked once more,
    and raises (LeaseLost, flows/lease.py) unless the Lease was renewed meanwhile. A
    cancellation that comes during a fenced write is raised once the write is answered."""

    fence: Fence | None = None

    def __init__(self, configuration: client.Configuration) -> None:
        configuration.retries = False
        super().__init__(configuration)

    def fenced(self, fence: Fence | None) -> RetryingApiClient:
        """This client (the same configuration and connections) with the given fence."""
        view = copy.copy(self)
        view.fence = fence
        return view

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        timeout = kwargs.get("_request_timeout")
        bound = timeout if isinstance(timeout, int | float) else None
        path, _, query = url.partition("?")
        path = path.removeprefix(str(self.configuration.host))
        fence = self.fence if _is_fenced(method, path, query) else None

        def deadline() -> float:
            """The fence's deadline; it raises once the run may not write."""
            until = fence() if fence is not None else None
            return math.inf if until is None else until

        def attempt() -> Any:
            if fence is not None:  # every try passes the fence, and waits no longer
                left = deadline() - time.monotonic()
                kwargs["_request_timeout"] = _shorter(timeout, left)
            try:
                with _answered_first() if fence is not None else contextlib.nullcontext():
                    response = super(RetryingApiClient, self).call_api(method, url, *args, **kwargs)
            except (Urllib3Error, OSError) as exc:
                raise Retry(exc) from exc
            except ApiException as exc:
                if exc.status:  # status 0: no HTTP answer (TLS failed)
                    raise
                raise Retry(exc) from exc
            if response.status == 429 or response.status >= 500:
                response.read()
                error = ApiException(http_resp=response)
                raise Retry(
                    error,
                    after_s=retry_after(response.getheader("Retry-After")),
                    note=f"API server answered {response.status} ({_reason(error)})",
                )
            return response

        rules = policy(bound, until=deadline if fence is not None else None)
        return with_retries(attempt, what=f"{method} {path}", rules=rules)


@contextlib.contextmanager
def _answered_first() -> Iterator[None]:
    """A cancellation (SIGTERM, SIGINT) that comes while a write is in flight is raised
    once its answer is in. Raised mid-request, it leaves the write unknown to the run: the
    apiserver may apply it after the rollback that follows has read the object, and the
    rollback then decides from a state that no longer holds (a scale to 0 landing after the
    restore had found the replicas as recorded). A write waits at most its fence's
    deadline, so the cancellation waits no longer either."""
    pending = signals.Held()
    try:
        with signals.held() as pending:
            yield
    finally:  # raised even when the write failed (the failure stays as its context)
        signals.deliver(pending)


def _is_fenced(method: str, path: str, query: str) -> bool:
    """A real write: not a read, not a dry-run, not a request for a Lease (the Leases
    are how a run holds the fence; flows/kube/leases.py)."""
    dry = any(p.startswith("dryRun=") for p in query.split("&"))
    return method.upper() in _MUTATING and not dry and "/leases" not in path


def _shorter(timeout: Any, left_s: float) -> Any:
    """The request timeout (a number, a (connect, read) pair or None), cut to left_s."""
    left_s = max(0.001, left_s)
    if math.isinf(left_s):
        return timeout
    if isinstance(timeout, int | float):
        return min(float(timeout), left_s)
    if isinstance(timeout, tuple):
        return tuple(min(float(t), left_s) if t is not None else left_s for t in timeout)
    return left_s


@dataclass(frozen=True)
class Kube:
    """Typed API groups over one authenticated connection."""

    api: client.ApiClient
    in_cluster: bool = False
    # Called before every write (not dry-runs): raises to stop a run that may no longer
    # write, e.g. one whose Lease was lost (flows/lease.py); else it returns the
    # time.monotonic() by which the write must be done (the Lease's remaining time), and
    # the write's retries stop there (RetryingApiClient.fenced).
    fence: Fence | None = None

    def __post_init__(self) -> None:
        if isinstance(self.api, RetryingApiClient) and self.api.fence is not self.fence:
            object.__setattr__(self, "api", self.api.fenced(self.fence))

    def check_fence(self) -> float | None:
        """None when unfenced; else the fence's deadline (or it raises)."""
        return self.fence() if self.fence is not None else None

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    @property
    def server(self) -> str:
        return str(self.api.configuration.host)

    def close(self) -> None:
        self.api.close()


def connect(kubeconfig: Path | str | None = None) -> Kube:
    """A client for the given kubeconfig, $KUBECONFIG, ~/.kube/config or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return Kube(RetryingApiClient(configuration), in_cluster=True)
    path = Path(path or Path.home() / ".kube" / "config")
    if not path.is_file():
        raise KubeError(
            f"no kubeconfig at {path}: pass --kubeconfig, set KUBECONFIG, "
            "or start the sandbox with `handoff sandbox up`"
        )
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return Kube(RetryingApiClient(configuration))


@contextlib.contextmanager
def mapped(action: str) -> Iterator[None]:
    """Map client exceptions raised while doing `action` to flows.errors, chained."""
    try:
        yield
    except ApiException as exc:
        raise _map(action, exc) from exc
    except (Urllib3Error, OSError) as exc:
        raise KubeUnavailable(
            f"{action}: API server unreachable ({exc}); retry when it answers"
        ) from exc


def _map(action: str, exc: ApiException) -> Exception:
    status = exc.status or 0
    detail = _reason(exc)
    if status == 409:
        return Conflict(f"{action}: conflict ({detail}); re-read the object and retry")
    if status == 404:
        return NotFound(f"{action}: not found ({detail})", status=status)
    if status in (401, 403):
        return Forbidden(
            f"{action}: forbidden ({detail}); grant the flow's ServiceAccount this verb "
            "(see manifests/rbac/)",
            status=status,
        )
    if status == 429 or status >= 500:
        return KubeUnavailable(f"{action}: API server answered {status} ({detail})")
    return KubeError(f"{action}: refused with {status} ({detail})", status=status)


def _reason(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)
