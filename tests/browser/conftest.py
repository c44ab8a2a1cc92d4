"""A real headless Chromium (Debian's package, driven by Playwright's Python package) against
the live test server. Under CI=true a missing browser or Playwright is a failure, never a skip."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.conftest import missing_requirement

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("PGJOBS_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser():
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        missing_requirement(
            f"chromium ({CHROMIUM})", "apt-get update && apt-get install -y chromium"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_requirement("playwright", "pip install -e '.[browser]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def admin_static(tmp_path_factory):
    """The live server needs STATIC_URL before it starts (tests/settings.py has none); serve
    the admin's CSS and our dashboard.js from their packages, so the pages look as deployed."""
    import django.contrib.admin
    from django.test import override_settings

    import django_pgjobs

    root = tmp_path_factory.mktemp("static")
    (root / "admin").symlink_to(Path(django.contrib.admin.__file__).parent / "static" / "admin")
    (root / "django_pgjobs").symlink_to(
        Path(django_pgjobs.__file__).parent / "static" / "django_pgjobs"
    )
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(root)):
        yield


@pytest.fixture
def page(admin_static, browser, live_server, transactional_db, monkeypatch):
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test are
    # still synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    User.objects.create_superuser("ops", "ops@example.com", "secret-pw")
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
