"""A ``str`` target is always a URL (issue 18, item 6; issue 20, item 2): a string is never started as a
program, and a wrong target is refused before any I/O with a message that shows both right forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from acp_client import ReconnectingClient, connect
from acp_client.exceptions import UsageError

BOTH_FORMS = ("ws://127.0.0.1:8765/acp", "['my-agent', '--acp']")


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("touch ./pwned", "must be a URL"),
        ("127.0.0.1:8765/acp", "must be a URL"),
        ("ws//127.0.0.1:8765/acp", "must be a URL"),
        ("ftp://127.0.0.1/acp", "unsupported scheme 'ftp'"),
        ("ws:///acp", "no host"),
        ([], "empty argv"),
        (["agent", 3], r"strings \(or paths\) only"),
        (42, "not int"),
    ],
)
async def test_a_bad_target_is_refused_before_any_io(
    target: object, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=says) as caught:
        async with connect(target):  # type: ignore[arg-type]
            pass
    assert all(form in str(caught.value) for form in BOTH_FORMS)
    with pytest.raises(UsageError, match=says):
        ReconnectingClient(target)  # type: ignore[arg-type]
    assert not (tmp_path / "pwned").exists()  # nothing was run


def test_a_url_target_shows_no_credentials_when_refused() -> None:
    with pytest.raises(UsageError) as caught:
        ReconnectingClient("gopher://me:hunter2@host/acp?token=abc")
    assert "hunter2" not in str(caught.value) and "abc" not in str(caught.value)
