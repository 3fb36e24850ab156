"""Small rules for plain values that every reader shares: what a count read from JSON is, an
exception's text as one line (every error message of the tools is one line), and the type of
the error class a caller hands a check."""

from __future__ import annotations

#: An error class a check raises, given by its caller (each package has its own typed errors)
ErrorType = type[Exception]


def is_count(value: object) -> bool:
    """A non-negative JSON integer (``true`` is not one, although Python's bool is an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def one_line(text: object) -> str:
    """Collapse a (possibly multi-line) exception text into one line for error messages."""
    return " ".join(str(text).split())
