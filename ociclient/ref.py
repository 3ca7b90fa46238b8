"""Image references: ``registry/repository:tag`` and ``registry/repository@sha256:…``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ociclient.client import registry_base_url


class ImageRef(BaseModel):
    """A parsed image reference; ``tag`` or ``digest`` (or both) is set."""

    model_config = ConfigDict(frozen=True)

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse as Docker does: the first path part is a registry if it has a dot or port."""
        rest, _, digest = text.partition("@")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, remainder
        else:
            registry, path = "registry-1.docker.io", rest
            path = path if "/" in path else f"library/{path}"
        name, colon, tag = path.rpartition(":")
        if not colon or "/" in tag:
            name, tag = path, ""
        if not name or not (tag or digest):
            raise ValueError(
                f"image reference {text!r}: expected REGISTRY/REPOSITORY:TAG or "
                "REGISTRY/REPOSITORY@sha256:…"
            )
        return cls(registry=registry, repository=name, tag=tag or None, digest=digest or None)

    @property
    def base_url(self) -> str:
        return registry_base_url(self.registry)

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag."""
        return self.digest or self.tag or ""

    def pinned(self, digest: str) -> str:
        """``registry/repository@digest``: what a Deployment should run."""
        return f"{self.registry}/{self.repository}@{digest}"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        text += f":{self.tag}" if self.tag else ""
        return text + (f"@{self.digest}" if self.digest else "")
