"""Prompt content: small helpers that build ACP content blocks, the same in protocol v1 and v2.

A content block is the JSON object ACP puts in a prompt (and in message updates): ``{"type": "text",
"text": "..."}`` and friends. The helpers check their arguments and raise
:class:`~acp_client.exceptions.UsageError` with a message that says what was expected, so a mistake is found
where it is made, not by the agent::

    from acp_client import embedded_resource, image, resource_link, text

    await session.prompt([
        text("What does this screenshot show?"),
        image(png_bytes, "image/png"),
        resource_link("file:///work/app.py", "app.py", mime_type="text/x-python"),
        embedded_resource("file:///work/notes.md", text="# notes ..."),
    ])

``Session.prompt`` accepts a string (one text block), one block, or a sequence of blocks and strings;
:func:`prompt_blocks` is the normalisation it uses. Blocks are plain ``dict`` objects, so content received
from an agent can be sent back as it is, and fields this SDK does not know yet are kept.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from acp_client.exceptions import UsageError

__all__ = [
    "ContentBlock",
    "PromptContent",
    "embedded_resource",
    "image",
    "prompt_blocks",
    "resource_link",
    "text",
]

#: One ACP content block: a JSON object with a ``type`` (``text``, ``image``, ``audio``, ``resource_link``,
#: ``resource``, or a newer one).
ContentBlock: TypeAlias = dict[str, Any]
#: What ``Session.prompt`` accepts: a string, one block, or a sequence of blocks and strings.
PromptContent: TypeAlias = str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]]


def _type_name(value: object) -> str:
    return type(value).__name__


def _require_str(function: str, name: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{function}(): {name} must be a str, not {_type_name(value)}")
    if not empty and not value:
        raise UsageError(f"{function}(): {name} must not be empty")
    return value


def _optional_str(function: str, name: str, value: object) -> str | None:
    return None if value is None else _require_str(function, name, value)


def _mime_type(function: str, value: object, *, prefix: str | None = None) -> str:
    mime = _require_str(function, "mime_type", value, empty=False)
    major, slash, minor = mime.partition("/")
    if not slash or not major or not minor:
        raise UsageError(f"{function}(): mime_type must look like 'type/subtype' (e.g. 'image/png'), not {mime!r}")
    if prefix is not None and major.lower() != prefix:
        raise UsageError(f"{function}(): mime_type must be a {prefix}/* type, not {mime!r}")
    return mime


def _uri(function: str, value: object) -> str:
    uri = _require_str(function, "uri", value, empty=False)
    if not urlsplit(uri).scheme:
        raise UsageError(f"{function}(): uri must be an absolute URI such as 'file:///work/app.py', not {uri!r}")
    return uri


def _base64(function: str, name: str, value: object) -> str:
    """``bytes`` are encoded; a ``str`` must already be base64."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, str):
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError(
                f"{function}(): {name} given as a str must be base64; pass bytes to have it encoded"
            ) from None
        return value
    raise UsageError(f"{function}(): {name} must be bytes (or a base64 str), not {_type_name(value)}")


def _extras(block: ContentBlock, annotations: Mapping[str, Any] | None, meta: Mapping[str, Any] | None) -> ContentBlock:
    if annotations is not None:
        if not isinstance(annotations, Mapping):
            raise UsageError(f"annotations must be a mapping, not {_type_name(annotations)}")
        block["annotations"] = dict(annotations)
    if meta is not None:
        if not isinstance(meta, Mapping):
            raise UsageError(f"meta must be a mapping, not {_type_name(meta)}")
        block["_meta"] = dict(meta)
    return block


def text(
    value: str, *, annotations: Mapping[str, Any] | None = None, meta: Mapping[str, Any] | None = None
) -> ContentBlock:
    """A text block (plain text or Markdown); every agent accepts it."""
    return _extras({"type": "text", "text": _require_str("text", "value", value)}, annotations, meta)


def image(
    data: bytes | str,
    mime_type: str,
    *,
    uri: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ContentBlock:
    """An image block: ``data`` as bytes (encoded here) or a base64 str, and its ``image/*`` MIME type.

    Send it only to agents that advertise ``promptCapabilities.image``.
    """
    block: ContentBlock = {
        "type": "image",
        "data": _base64("image", "data", data),
        "mimeType": _mime_type("image", mime_type, prefix="image"),
    }
    if uri is not None:
        block["uri"] = _uri("image", uri)
    return _extras(block, annotations, meta)


def resource_link(
    uri: str,
    name: str,
    *,
    title: str | None = None,
    description: str | None = None,
    mime_type: str | None = None,
    size: int | None = None,
    annotations: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ContentBlock:
    """A link to a resource the agent can read itself (``file://...``, ``https://...``); ``name`` is shown.

    Every agent accepts resource links in prompts.
    """
    block: ContentBlock = {
        "type": "resource_link",
        "uri": _uri("resource_link", uri),
        "name": _require_str("resource_link", "name", name, empty=False),
    }
    for key, value in (("title", title), ("description", description)):
        if value is not None:
            block[key] = _require_str("resource_link", key, value)
    if mime_type is not None:
        block["mimeType"] = _mime_type("resource_link", mime_type)
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise UsageError(f"resource_link(): size must be a non-negative int, not {size!r}")
        block["size"] = size
    return _extras(block, annotations, meta)


def embedded_resource(
    uri: str,
    *,
    text: str | None = None,
    blob: bytes | str | None = None,
    mime_type: str | None = None,
    annotations: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ContentBlock:
    """A resource whose contents travel in the prompt: exactly one of ``text`` or ``blob`` (bytes, or a
    base64 str). Send it only to agents that advertise ``promptCapabilities.embeddedContext``."""
    if (text is None) == (blob is None):
        raise UsageError("embedded_resource(): pass exactly one of text= or blob=")
    resource: dict[str, Any] = {"uri": _uri("embedded_resource", uri)}
    if text is not None:
        resource["text"] = _require_str("embedded_resource", "text", text)
    else:
        resource["blob"] = _base64("embedded_resource", "blob", blob)
    if mime_type is not None:
        resource["mimeType"] = _mime_type("embedded_resource", mime_type)
    return _extras({"type": "resource", "resource": resource}, annotations, meta)


def _block(item: object, where: str) -> ContentBlock:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if isinstance(item, Mapping):
        kind = item.get("type")
        if not isinstance(kind, str) or not kind:
            raise UsageError(
                f"{where} is a mapping without a 'type' string; build blocks with acp_client.text(), image(), "
                "resource_link() or embedded_resource()"
            )
        return dict(item)
    raise UsageError(f"{where} must be a str or a content block (a dict with a 'type'), not {_type_name(item)}")


def prompt_blocks(content: PromptContent) -> list[ContentBlock]:
    """Normalise prompt content to a list of blocks: a str becomes one text block, a block a list of one,
    and each str in a sequence a text block. Anything else raises ``UsageError`` saying what is accepted."""
    value: object = content  # checked at run time: callers are not always type-checked
    if isinstance(value, str | Mapping):
        return [_block(value, "the prompt")]
    if isinstance(value, bytes | bytearray) or not isinstance(value, Sequence):
        raise UsageError(
            f"prompt content must be a str, a content block or a list of them, not {_type_name(value)} "
            "(e.g. session.prompt('hello') or session.prompt([text('hi'), image(data, 'image/png')]))"
        )
    if not value:
        raise UsageError("prompt content must not be empty")
    return [_block(item, f"prompt item {index}") for index, item in enumerate(value)]
