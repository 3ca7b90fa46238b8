"""The exceptions the registry client raises, under one base of their own.

httpx errors and registry statuses are mapped to these once, in ``ociclient.client`` and
``ociclient.auth``, with the original chained as ``__cause__``. A caller that has its own
error tree maps these to it once (the flow's image step: ``flows/image.py``).

    RegistryError                  base: every failure the registry client raises on purpose
    ├── RegistryUnavailable        registry unreachable or answering 429/5xx: may clear
    ├── ImageNotFound              the registry has no such repository/tag/digest
    ├── RegistryAuthError          the registry refused the credentials (or there were none)
    └── RegistryRefused            any other refusal by the registry (4xx, bad manifest)

Messages name the object, what was expected, what was observed and what to do next.
"""

from __future__ import annotations


class RegistryError(Exception):
    """Base of every error the registry client raises on purpose."""


class RegistryUnavailable(RegistryError):
    """The registry could not be reached or answered with a server error (or 429)."""


class ImageNotFound(RegistryError):
    """The registry has no manifest for the requested repository and reference."""


class RegistryAuthError(RegistryError):
    """The registry (or its token service) refused to authorise the request."""


class RegistryRefused(RegistryError):
    """The registry refused a request for a reason other than auth or absence."""
