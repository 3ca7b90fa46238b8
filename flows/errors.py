"""The exceptions a handoff raises, in one hierarchy.

Client exceptions (httpx, git, kubernetes) are mapped to these once, at the boundary that
calls the client, with the original chained as ``__cause__``. The flow retries a
``TransientError``; a ``PermanentError`` stops the handoff (and, after the apply, rolls back).

    HandoffError
    ├── TransientError                 retried until the step's deadline
    │   └── RegistryUnavailable        registry unreachable or answering 5xx
    └── PermanentError                 retrying would not help
        ├── GateFailed                 a gate measured the candidate and said no
        ├── ApprovalRejected           a person declined the handoff
        ├── ImageNotReady              no acceptable image appeared before the deadline
        ├── ImageNotFound              the registry has no such repository/tag/digest
        ├── RegistryAuthError          the registry refused the credentials (or there were none)
        ├── RegistryError              any other refusal by the registry (4xx, bad manifest)
        ├── SourceUnavailable          the source repository cannot be cloned or fetched
        └── ProvenanceError            an image's revision does not prove the required fixes
            ├── MissingRevisionLabel   no org.opencontainers.image.revision in the config
            ├── UnknownCommit          a revision or required commit is not in the repository
            └── FixMissing             a required commit is neither an ancestor nor cherry-picked

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


class RegistryUnavailable(TransientError):
    """The registry could not be reached or answered with a server error."""


class ImageNotReady(PermanentError):
    """No image passing the provenance check appeared before the deadline.

    ``seen`` holds what the wait observed (one record per digest), for reports.
    """

    def __init__(self, message: str, *, seen: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.seen = seen


class ImageNotFound(PermanentError):
    """The registry has no manifest for the requested repository and reference."""


class RegistryAuthError(PermanentError):
    """The registry (or its token service) refused to authorise the request."""


class RegistryError(PermanentError):
    """The registry refused a request for a reason other than auth or absence."""


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
