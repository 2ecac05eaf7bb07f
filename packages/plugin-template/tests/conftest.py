import pytest

TEMPLATE_ENV = ("TEMPLATE_LIBRARY_PATH", "TEMPLATE_NUM_DEVICES", "PJRT_DEVICE")


@pytest.fixture(autouse=True)
def clean_template_env(monkeypatch):
    """Every test starts without the template's variables; whatever it sets is undone."""
    for name in TEMPLATE_ENV:
        monkeypatch.delenv(name, raising=False)
