"""The exceptions a handoff raises, in one hierarchy.

Client exceptions (httpx, git, kubernetes) are mapped to these once, at the boundary that
calls the client, with the original chained as ``__cause__``. The registry client's own
errors (``ociclient.errors``, a tree of their own) are mapped by the image step
(``flows/image.py``): a registry that is unreachable or answers 429/5xx is a
``TransientError``, a missing image an ``ImageMissing``, refused credentials or any other
refusal a ``PermanentError``; messages unchanged. The classes below live here unless the
tree names a module of ``flows`` (the step or client that raises them);
tests/flows/test_error_tree.py fails when a subclass is missing from the tree or hangs under
another parent.

    HandoffError
    ├── TransientError                 a condition that may clear by itself
    │   ├── NewestUnknown              (newest) the Prefect API could not be asked
    │   ├── Conflict                   (kube.client) 409: the object changed since it was read
    │   ├── KubeUnavailable            (kube.client) API server unreachable or answering 5xx/429
    │   └── WaitTimedOut               (kube.wait) a wait for pods or ReplicaSets hit its deadline
    └── PermanentError                 retrying would not help
        ├── GateFailed                 a gate measured the candidate and said no
        ├── ApprovalRejected           a person declined the handoff
        │   └── ApprovalTimedOut       (approve) nobody answered within the approval timeout
        ├── ImageNotReady              no acceptable image appeared before the deadline
        ├── ImageMissing               the registry has no such repository/tag/digest
        ├── SourceUnavailable          the source repository cannot be cloned or fetched
        ├── ProvenanceError            an image's revision does not prove the required fixes
        │   ├── MissingRevisionLabel   no org.opencontainers.image.revision in the config
        │   ├── UnknownCommit          a revision or required commit is not in the repository
        │   └── FixMissing             a required commit is neither an ancestor nor cherry-picked
        ├── KubeError                  (kube.client) the API server refused a request
        │   ├── NotFound               (kube.client) the object does not exist
        │   └── Forbidden              (kube.client) RBAC denies the flow's identity
        ├── SpecError                  (spec) the handoff spec is malformed
        ├── SpecRefused                (spec_paths) a spec file outside the specs directory
        ├── ManifestError              (render) the candidate manifest is unreadable
        ├── NotifyBlockError           (report.notify) the spec's notify.block is unusable
        ├── PlanRefused                (plan) the cluster cannot take the handoff as specified
        ├── HandoffInProgress          (lease) another handoff holds the Service's Lease
        ├── LeaseLost                  (lease) this run no longer holds the Lease
        ├── RollbackUnfinished         (start) a resumed run had started rolling back
        ├── CandidateChanged           (start) a resumed run's manifest is not the one gated
        ├── RestoreNotReady            (rollback) what to move back to has no Ready pod
        ├── SelectorEdited             (kube.write) a selector this handoff did not decide from
        ├── WorkloadReplaced           (kube.write) a Deployment of the handoff's name is another
        ├── ReplicasEdited             (kube.write) a replica count this handoff did not decide from
        ├── SpecEdited                 (kube.write) a spec changed since a rollback decided from it
        ├── HistoryUnreadable          (ledger) the history annotation is not a JSON list
        ├── BaselineError              (baseline) no live pod of another workload to compare with
        ├── CandidateFailed            (warm) the candidate's pods cannot become ready
        ├── DowntimeExceeded           (outage) the outage reached its estimate without a swap
        ├── SwapFailed                 (swap) the Service does not serve only the candidate
        ├── PersonEdited               (drift) someone changed an object the handoff works on
        ├── BakeBreached               (bake) the candidate breached the bake's SLOs
        ├── WrongCommit                (source_tree) a merge's run found another commit's tree
        ├── WrongCode                  (running_code) code or dependencies other than the merge's
        ├── SigningKeyError            (report.attest) a signing or verification key is unusable
        ├── UnsignedTrigger            (webhook.event_signature) a commit the relay did not sign
        ├── PoolTemplateError          (workpool) the work pool template cannot be rendered as asked
        └── ServiceGone                (drift) the Service was deleted during the handoff

Where a TransientError is retried, and nowhere else: a request to the API server or the
registry that gets no answer, a 429 or a 5xx is retried by the one policy of
retrypolicy/retry.py (for at most HANDOFF_RETRY_S) before it is raised as KubeUnavailable
or as ociclient's RegistryUnavailable; a read-modify-write that meets a Conflict reads again
and retries under the same policy (flows/kube/write.py); the image step records a
RegistryUnavailable as a sighting and polls on until its own timeout (flows/image.py); the
Lease's renewal retries until the Lease would expire (flows/lease.py). Anywhere else a
TransientError fails the run as a PermanentError does: the handoff stops (and, after the
apply, rolls back); no step is retried as a whole.

Messages name the object, what was expected, what was observed and what to do next.
"""

from __future__ import annotations


class HandoffError(Exception):
    """Base of every error a handoff raises on purpose."""


class TransientError(HandoffError):
    """A condition that may clear by itself; the caller retries until its deadline."""


class PermanentError(HandoffError):
    """A condition that retrying will not change."""


class GateFailed(PermanentError):
    """A gate (smoke, parity, latency) rejected the candidate."""


class ApprovalRejected(PermanentError):
    """The approver declined the handoff."""


class ImageNotReady(PermanentError):
    """No image passing the provenance check appeared before the deadline.

    ``seen`` holds what the wait observed (one record per digest), for reports.
    """

    def __init__(self, message: str, *, seen: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.seen = seen


class ImageMissing(PermanentError):
    """The registry has no manifest for the requested repository and reference."""


class SourceUnavailable(PermanentError):
    """The image's source repository cannot be cloned or fetched."""


class ProvenanceError(PermanentError):
    """An image's recorded revision does not prove that it contains the required fixes."""


class MissingRevisionLabel(ProvenanceError):
    """The image config carries no ``org.opencontainers.image.revision`` label."""


class UnknownCommit(ProvenanceError):
    """A revision or required commit does not exist in the source repository."""


class FixMissing(ProvenanceError):
    """A required commit is not in the image's revision, directly or as a cherry-pick."""
