"""Is a delivery's repository the one the relay serves?

An org-wide hook, or anyone holding the secret, can send the merge of another
repository; its spec files have the names of ours. The relay serves one repository:
`--repository` names it as the forge does (owner/name, compared without case), and
`--clone-url` says where it lives. A payload naming another full name, or a clone URL
that is not the configured one, is refused. URLs are compared by host and path (scheme,
user, port, a trailing `/` or `.git` aside: the forge's https URL and the relay's ssh
URL of one repository agree); local paths after resolving them.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

from flows.webhook.payload import Merge
from flows.webhook.settings import RelaySettings

_SCP = re.compile(r"^[\w.+-]+@([^:/]+):(.*)$")  # user@host:path


def url_key(url: str) -> str:
    """Host and path of a git URL or local path, in one comparable form."""
    url = url.strip()
    scp = _SCP.match(url)
    if scp:
        host, path = scp.group(1), scp.group(2)
    elif "://" in url:
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError:
            return url
        path = parts.path if host or parts.scheme != "file" else str(Path(parts.path).resolve())
    else:
        host, path = "", str(Path(url).expanduser().resolve())
    path = path.rstrip("/").removesuffix(".git").rstrip("/")
    return f"{host.lower()}:{path.lower() if host else path}"


def identity_problem(settings: RelaySettings, merge: Merge) -> str | None:
    """Why the merge is not of the relay's repository, or None when it is."""
    if settings.repository is None and settings.clone_url is None:
        return (
            f"the relay cannot tell its repository from {merge.repository}: it has neither "
            "--repository nor --clone-url; set them"
        )
    if settings.repository and merge.repository.lower() != settings.repository.lower():
        return (
            f"delivery for repository {merge.repository}, but the relay serves "
            f"{settings.repository} (--repository): not relayed"
        )
    if (
        settings.clone_url
        and merge.clone_url
        and url_key(merge.clone_url) != url_key(settings.clone_url)
    ):
        return (
            f"delivery for the repository at {merge.clone_url[:200]!r}, but the relay serves "
            f"the one at {settings.clone_url!r} (--clone-url): not relayed"
        )
    return None
