"""Text from adapters made inert: every character visible, nothing a terminal, an XML parser
or an HTML page would act on.

Adapter messages, subject names and captured output reach results.json, the HTML page,
JUnit XML and the terminal. ``visible`` keeps newlines and tabs, and writes every other
control character (C0, DEL, C1, ANSI escape sequences' ESC), every lone surrogate (bytes
that were not UTF-8, decoded with ``surrogateescape``) and every character XML 1.0 forbids
as a visible escape (``\\x1b``, ``\\udcff``, ``\\ufffe``). The result encodes as UTF-8 and
is well-formed in XML.
"""

from __future__ import annotations

import re
from typing import Any

# Everything but \t and \n below U+0020, DEL and C1 controls, lone surrogates, U+FFFE/FFFF.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: Any) -> str:
    """``text`` (anything: ``str()`` of it, which never raises here) with every unsafe
    character written as a visible escape."""
    if not isinstance(text, str):
        text = safe_str(text)
    if isinstance(text, bytes):  # pragma: no cover - safe_str returns str
        text = text.decode("utf-8", "backslashreplace")
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))


def safe_str(value: Any) -> str:
    """``str(value)`` for anything, also an object whose ``__str__`` raises or returns
    something else than text: then its type and what went wrong."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    try:
        text = str(value)
        if isinstance(text, str):
            return text
    except BaseException as err:
        try:
            reason = type(err).__name__
        except BaseException:
            reason = "an error"
        return f"<{type(value).__name__} whose str() raised {reason}>"
    return f"<{type(value).__name__} whose str() did not return text>"


def bounded(text: str, limit: int = 20_000) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and its tail."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"
