"""A plugin's environment variables, read one way: a parser per kind of value, one error style.

Every reader returns `default` when the variable is unset or blank (the shell's
`NAME=` unsets it), and the parsed value otherwise. A value it cannot accept
raises `PluginError` naming the variable, the value, what was expected and how
to fix it, e.g. ``CPU_NUM_DEVICES='two' is not a positive integer; set one, or
unset it for the default (1).``
"""

from __future__ import annotations

import os
from typing import TypeVar

from torch_xla.plugins.registry import PluginError

D = TypeVar("D")

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def env_text(name: str) -> str | None:
    """The variable's value without surrounding blanks; None when unset or blank."""
    text = os.environ.get(name, "").strip()
    return text or None


def env_int(name: str, default: D, *, minimum: int | None = None) -> int | D:
    """An integer, at least `minimum` when given (0: a count, 1: a positive count)."""
    text = env_text(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or (minimum is not None and value < minimum):
        raise _bad_value(name, _integer_kind(minimum), default)
    return value


def env_fraction(name: str, default: D = None) -> float | D:
    """A fraction in (0, 1], such as a share of device memory."""
    text = env_text(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0.0 < value <= 1.0:
        raise _bad_value(name, "a fraction in (0, 1]", default, example="0.75")
    return value


def env_flag(name: str, default: D = False) -> bool | D:
    """A boolean written as one of `TRUE_WORDS` or `FALSE_WORDS` (any case)."""
    text = env_text(name)
    if text is None:
        return default
    if text.lower() in TRUE_WORDS + FALSE_WORDS:
        return text.lower() in TRUE_WORDS
    words = "/".join(TRUE_WORDS + FALSE_WORDS)
    raise _bad_value(name, f"a boolean ({words})", default)


def env_file(name: str, *, expected: str, fallback: str) -> str | None:
    """The path of an existing file, or None when unset; a path naming no file is an error.

    `expected` says what the file should be (``libacme_pjrt.so``) and `fallback`
    what is used when the variable is unset (``the installed acme-pjrt``).
    """
    path = env_text(name)
    if path is not None and not os.path.isfile(path):
        raise PluginError(
            f"{name}={path!r} is not a file; point it at {expected}, or unset it to use {fallback}."
        )
    return path


def _integer_kind(minimum: int | None) -> str:
    if minimum is None:
        return "an integer"
    return {0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}"
    )


def _bad_value(name: str, expected: str, default: object, example: str = "") -> PluginError:
    for_instance = f", e.g. {name}={example}" if example else ""
    unset = "unset it" if default is None else f"unset it for the default ({default})"
    return PluginError(
        f"{name}={os.environ[name]!r} is not {expected}; set one{for_instance}, or {unset}."
    )
