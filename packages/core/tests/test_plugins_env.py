"""torch_xla.plugins.env: the readers every plugin package uses for its environment variables."""

from __future__ import annotations

import os

import pytest

import torch_xla.plugins as plugins
from torch_xla.plugins import PluginError, env_file, env_flag, env_fraction, env_int, env_text

NAME = "TORCH_XLA_TEST_VARIABLE"


@pytest.fixture
def setenv(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    return lambda value: monkeypatch.setenv(NAME, value)


def test_exported_from_the_plugin_api():
    for name in ("env_text", "env_int", "env_fraction", "env_flag", "env_file"):
        assert name in plugins.__all__ and getattr(plugins, name) is not None


@pytest.mark.parametrize("blank", [None, "", "  "])
def test_unset_or_blank_gives_the_default(setenv, blank):
    if blank is not None:
        setenv(blank)
    assert env_text(NAME) is None
    assert env_int(NAME, 7) == 7 and env_int(NAME, None, minimum=1) is None
    assert env_fraction(NAME) is None and env_fraction(NAME, 0.5) == 0.5
    assert env_flag(NAME) is False and env_flag(NAME, None) is None
    assert env_file(NAME, expected="lib.so", fallback="the bundled one") is None


def test_text_is_stripped(setenv):
    setenv(" 0-3 ")
    assert env_text(NAME) == "0-3"


@pytest.mark.parametrize(("text", "minimum", "value"), [
    ("3", None, 3), (" -2 ", None, -2), ("0", 0, 0), ("4", 1, 4), ("16", 16, 16),
])
def test_int(setenv, text, minimum, value):
    setenv(text)
    assert env_int(NAME, 1, minimum=minimum) == value


@pytest.mark.parametrize(("text", "minimum", "expected"), [
    ("many", None, "an integer"),
    ("1.5", None, "an integer"),
    ("-1", 0, "a non-negative integer"),
    ("0", 1, "a positive integer"),
    ("x", 1, "a positive integer"),
    ("8", 16, "an integer >= 16"),
])
def test_bad_int_names_variable_value_and_expectation(setenv, text, minimum, expected):
    setenv(text)
    with pytest.raises(PluginError) as error:
        env_int(NAME, 1, minimum=minimum)
    assert str(error.value) == (
        f"{NAME}={text!r} is not {expected}; set one, or unset it for the default (1)."
    )


def test_bad_value_without_a_default_says_to_unset_it(setenv):
    setenv("-3")
    with pytest.raises(PluginError, match=r"not a non-negative integer; set one, or unset it\.$"):
        env_int(NAME, None, minimum=0)


@pytest.mark.parametrize(("text", "value"), [("1", 1.0), ("0.25", 0.25), (" .5", 0.5)])
def test_fraction(setenv, text, value):
    setenv(text)
    assert env_fraction(NAME) == value


@pytest.mark.parametrize("text", ["0", "1.5", "-0.1", "half", "nan", "inf"])
def test_bad_fraction(setenv, text):
    setenv(text)
    with pytest.raises(PluginError) as error:
        env_fraction(NAME)
    assert str(error.value) == (
        f"{NAME}={text!r} is not a fraction in (0, 1]; set one, e.g. {NAME}=0.75, or unset it."
    )


@pytest.mark.parametrize(("text", "value"), [
    ("1", True), ("TRUE", True), ("yes", True), ("On", True),
    ("0", False), ("false", False), ("NO", False), ("off", False),
])
def test_flag(setenv, text, value):
    setenv(text)
    assert env_flag(NAME) is value and env_flag(NAME, None) is value


def test_bad_flag_lists_the_words(setenv):
    setenv("maybe")
    with pytest.raises(PluginError) as error:
        env_flag(NAME)
    assert str(error.value) == (
        f"{NAME}='maybe' is not a boolean (1/true/yes/on/0/false/no/off); "
        "set one, or unset it for the default (False)."
    )


def test_file(setenv, tmp_path):
    library = tmp_path / "libacme_pjrt.so"
    library.write_bytes(b"")
    setenv(os.fspath(library))
    assert env_file(NAME, expected="libacme_pjrt.so", fallback="x") == os.fspath(library)


@pytest.mark.parametrize("where", ["missing.so", "."])
def test_file_naming_no_file_says_what_and_the_way_out(setenv, tmp_path, where):
    path = os.fspath(tmp_path / where)
    setenv(path)
    with pytest.raises(PluginError) as error:
        env_file(NAME, expected="libacme_pjrt.so", fallback="the installed acme-pjrt")
    assert str(error.value) == (
        f"{NAME}={path!r} is not a file; point it at libacme_pjrt.so, "
        "or unset it to use the installed acme-pjrt."
    )
