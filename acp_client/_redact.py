"""Credentials out of text: URLs lose their userinfo and the values of token-like query parameters.

The lowest module of the package (stdlib only): logs (:mod:`acp_client._logging`), exception texts
(:class:`acp_client.exceptions.ACPError`) and the CLI use it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["redact_url", "scrub_urls"]

#: query parameter names whose values are credentials (matched as substrings, case-insensitive)
_SECRET_QUERY = ("token", "key", "secret", "password", "passwd", "pwd", "auth", "sig", "credential", "code")


def redact_url(url: str) -> str:
    """``url`` fit for a log, an error text or a terminal: userinfo (``user:password@``) becomes
    ``<redacted>@`` and the values of token-like query parameters (``token``, ``api_key``, ``sig``, ...)
    become ``<redacted>``. A string that does not parse as a URL is returned unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "<redacted>@" + netloc.rpartition("@")[2]
    query = parts.query
    if query:
        pairs = []
        for item in query.split("&"):
            name, sep, value = item.partition("=")
            secret = sep and value and any(word in name.lower() for word in _SECRET_QUERY)
            pairs.append(f"{name}=<redacted>" if secret else item)
        query = "&".join(pairs)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,;:!?)\]]")  # a trailing colon is text


def scrub_urls(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url` (an error message quoting a URL with
    a password or a ``?token=`` keeps its shape, not its secret)."""
    return _URL.sub(lambda match: redact_url(match.group()), text) if "://" in text else text
