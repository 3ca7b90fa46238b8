"""Which URL the relay fetches a merge from, and what git may do with it.

The repository URL the relay is configured with (`--clone-url`) always wins: a payload
names its own clone URL, and whoever holds the secret (or a compromised forge) chooses
it. A payload's URL is used only when none is configured, and only when it is a plain
https, http, ssh or git URL (no local path, no file:// or ext::, no host starting with
"-", no spaces or control characters) on a host the relay allows (`--clone-host`; none
given: any host). git is then told to use that one transport and no redirects, and the
URL follows `--` on its command line, so it can never be read as an option.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SCHEMES = ("https", "http", "ssh", "git")
MAX_URL_CHARS = 2048
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")


class NotFetchable(ValueError):
    """The relay will not fetch from this URL; the message says why and what to set."""


@dataclass(frozen=True)
class Source:
    """A URL to fetch from, with the git settings that confine the fetch to it."""

    url: str
    config: dict[str, str] = field(default_factory=dict)


def source_of(payload_url: str | None, *, configured: str | None, hosts: frozenset[str]) -> Source:
    """The configured URL if any, else the payload's once it passes the rules above."""
    if configured:
        return Source(configured)
    if not payload_url:
        raise NotFetchable(
            "the payload has no repository.clone_url and the relay has no --clone-url"
        )
    scheme = _checked_scheme(payload_url)
    host = _checked_host(payload_url)
    if hosts and host not in hosts:
        raise NotFetchable(
            f"clone URL host {host} is not one the relay fetches from "
            f"({', '.join(sorted(hosts))}): add it with --clone-host, or set --clone-url"
        )
    return Source(
        payload_url,
        {
            "protocol.allow": "never",
            f"protocol.{scheme}.allow": "always",
            "http.followRedirects": "false",
        },
    )


def _checked_scheme(url: str) -> str:
    shown = url[:80] + ("…" if len(url) > 80 else "")
    if len(url) > MAX_URL_CHARS or _UNSAFE.search(url):
        raise NotFetchable(
            f"clone URL {shown!r} is longer than {MAX_URL_CHARS} characters or holds spaces, "
            "control characters or backslashes; set --clone-url"
        )
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise NotFetchable(
            f"clone URL {shown!r} is not an {', '.join(SCHEMES)} URL: the relay fetches only "
            "those from a payload; set --clone-url for any other repository location"
        )
    return scheme.lower()


def _checked_host(url: str) -> str:
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname or "", parts.port
    except ValueError as exc:
        raise NotFetchable(f"clone URL {url[:80]!r} does not parse: {exc}") from None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            raise NotFetchable(
                f"clone URL {url[:80]!r} has no valid host name (got {host[:80]!r})"
            ) from None
    return host.lower()
