"""The package as a user gets it: the sdist and the wheel built from it, checked by twine, and
the wheel installed (not editable) into a new virtualenv that runs a small Django project of its
own: migrate, enqueue, `runjobs --burst`, `pgjobs_health`, and the admin pages.

Nothing here imports the repository's copy of django_pgjobs in the child processes: they run
with the virtualenv's Python, from a temporary folder, without PYTHONPATH, and the first step
asserts where `django_pgjobs` was imported from. pip resolves Django, psycopg and croniter from
the package index, as a user's install would (its cache is reused).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.db import connection

import django_pgjobs
from tests.conftest import ROOT

# Building twice and a pip install that resolves Django from the index: more than the default.
pytestmark = pytest.mark.timeout(900)

VERSION = django_pgjobs.__version__
DIST = f"django_pgjobs-{VERSION}"
REPOSITORY = "https://github.com/django-pgjobs/django-pgjobs"


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(
            f"the {module!r} package is not installed: pip install 'build>=1.2' "
            "'twine>=6.1' (both are in the dev extra: pip install -e '.[dev]'; "
            "./dev test installs it)",
            pytrace=False,
        )


def run(
    argv: Sequence[str | Path],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    ok: bool = True,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,  # noqa: S603
        text=True,
        timeout=timeout,
        check=False,
    )
    if ok:
        assert proc.returncode == 0, (
            f"{' '.join(map(str, argv))} exited {proc.returncode}\n--- stdout\n"
            f"{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    build_seconds: float


def _source_tree(dest: Path) -> Path:
    """The work tree as a fresh checkout would have it, uncommitted edits included: the files git
    tracks or would track (not ignored). Building from the work tree itself would let a stale
    django_pgjobs.egg-info/SOURCES.txt there put files into the sdist that the configuration
    no longer selects."""
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        timeout=60,
    ).stdout
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # (a file deleted but not yet staged is listed too)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """`python -m build` on a clean copy of the work tree: the sdist, then the wheel from that
    sdist (so a file missing from the sdist breaks the wheel too)."""
    _require("build")
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    source = _source_tree(tmp_path_factory.mktemp("source"))
    run([sys.executable, "-m", "build", "--outdir", out, source], timeout=600)
    built = sorted(p.name for p in out.iterdir())
    assert built == [f"{DIST}-py3-none-any.whl", f"{DIST}.tar.gz"], built
    return Dists(
        out / f"{DIST}.tar.gz", out / f"{DIST}-py3-none-any.whl", time.monotonic() - started
    )


# --- what the distributions hold ---------------------------------------------------------------


def test_twine_check_passes_on_the_wheel_and_the_sdist(dists: Dists) -> None:
    _require("twine")
    proc = run(
        [sys.executable, "-m", "twine", "check", "--strict", dists.wheel, dists.sdist], timeout=120
    )
    assert proc.stdout.count("PASSED") == 2, proc.stdout


def _package_files() -> set[str]:
    """Every file git tracks under django_pgjobs/ (the package as the repository has it)."""
    listed = run(["git", "ls-files", "-z", "django_pgjobs"], cwd=ROOT, timeout=60).stdout
    return {name for name in listed.split("\0") if name}


def test_the_wheel_holds_the_whole_package_and_no_tests(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"{DIST}.dist-info/METADATA").decode()
    package = {n for n in names if n.startswith("django_pgjobs/")}
    # Every module, template, static file and migration of the repository, and nothing else.
    assert sorted(_package_files() - package) == [], "missing from the wheel"
    assert sorted(package - _package_files()) == [], "in the wheel, not in the repository"
    assert "django_pgjobs/py.typed" in package
    assert "django_pgjobs/templates/admin/django_pgjobs/dashboard.html" in package
    assert "django_pgjobs/templates/admin/django_pgjobs/job/change_list.html" in package
    assert "django_pgjobs/migrations/0001_initial.py" in package
    static = {n for n in _package_files() if n.startswith("django_pgjobs/static/")}
    assert static <= package  # (the package has no static files at the moment)
    others = names - package
    assert all(n.startswith(f"{DIST}.dist-info/") for n in others), sorted(others)
    assert f"{DIST}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith(("tests/", "example_project/", "bench/", "docs/")) for n in names)

    assert f"\nVersion: {VERSION}\n" in metadata
    assert "\nLicense-Expression: MIT\n" in metadata and "\nLicense-File: LICENSE\n" in metadata
    assert "\nAuthor: django-pgjobs contributors\n" in metadata
    for label, url in [
        ("Homepage", REPOSITORY),
        ("Documentation", f"{REPOSITORY}/blob/main/README.md"),
        ("Changelog", f"{REPOSITORY}/blob/main/CHANGELOG.md"),
        ("Issues", f"{REPOSITORY}/issues"),
    ]:
        assert f"\nProject-URL: {label}, {url}\n" in metadata
    # The README is the index page: its links must work there, so none is relative.
    description = metadata.split("\n\n", 1)[1]
    targets = re.findall(r"\]\(([^)\s]+)\)", description)
    assert targets and [t for t in targets if not t.startswith("https://")] == []


def test_the_sdist_holds_license_readme_changelog_docs_and_tests(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as sdist:
        names = {n.removeprefix(f"{DIST}/") for n in sdist.getnames()}
        license_text = sdist.extractfile(f"{DIST}/LICENSE").read().decode()  # type: ignore[union-attr]
    for name in (
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "pyproject.toml",
        "PKG-INFO",
        "docs/guarantees.md",
        "tests/conftest.py",
        "tests/settings.py",
        "django_pgjobs/py.typed",
    ):
        assert name in names, name
    assert {n for n in names if n.startswith("django_pgjobs/")} >= _package_files()
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert license_text.startswith("MIT License") and "django-pgjobs contributors" in license_text


# --- the wheel installed in a new virtualenv, running a project of its own ---------------------


@dataclass(frozen=True)
class Installed:
    python: Path
    install_seconds: float


@pytest.fixture(scope="module")
def installed(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A new virtualenv (this interpreter's base Python) with the wheel pip-installed."""
    env_dir = tmp_path_factory.mktemp("venv")
    started = time.monotonic()
    run([sys.executable, "-m", "venv", "--clear", env_dir], timeout=120, env=_clean_env())
    python = env_dir / "bin" / "python"
    run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--no-compile",
            "-q",
            dists.wheel,
        ],
        timeout=600,
        env=_clean_env(),
    )
    return Installed(python, time.monotonic() - started)


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less what would point a child at the repository."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "DJANGO_SETTINGS_MODULE",
            "VIRTUAL_ENV",
            "PYTHONHOME",
            "PGJOBS_TEST_DB_NAME",
            "DATABASE_URL",
        )
    }
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", **extra}


SETTINGS = """\
SECRET_KEY = "wheel-smoke-test"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
TIME_ZONE = "UTC"
DATABASES = {{"default": {database!r}}}
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_pgjobs",
    "smokeapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "smoke_urls"
TEMPLATES = [{{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {{"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]}},
}}]
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

FILES = {
    "manage.py": """\
        import os
        import sys

        from django.core.management import execute_from_command_line

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smoke_settings")
        execute_from_command_line(sys.argv)
        """,
    "smoke_urls.py": """\
        from django.contrib import admin
        from django.urls import path

        urlpatterns = [path("admin/", admin.site.urls)]
        """,
    "smokeapp/__init__.py": "",
    "smokeapp/jobs.py": """\
        from django_pgjobs import handler


        @handler("smoke.add")
        def add(job):
            return {"sum": job.config["a"] + job.config["b"]}
        """,
}

# Run by `manage.py shell -c` once the job ran: the job's outcome, then the admin pages of a
# logged-in superuser through Django's test Client.
CHECK_JOB_AND_ADMIN = """\
import json
from django.contrib.auth import get_user_model
from django.test import Client
from django_pgjobs.models import Job

job = Job.objects.get()
print("JOB", json.dumps({"status": job.status, "result": job.result, "attempts": job.attempts}))
user = get_user_model().objects.create_superuser("smoke", "smoke@example.com", "unused")
client = Client()
client.force_login(user)
for url in ["/admin/django_pgjobs/dashboard/", "/admin/django_pgjobs/job/",
            f"/admin/django_pgjobs/job/{job.id}/change/"]:
    response = client.get(url)
    print("PAGE", url, response.status_code)
    if url.endswith("/dashboard/"):
        print("DASHBOARD", response.content.decode())
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A Django project in a temporary folder, on a database of its own (created, then dropped)."""
    s = connection.settings_dict
    server = {
        "host": s["HOST"] or "127.0.0.1",
        "port": s["PORT"] or 5432,
        "user": s["USER"],
        "password": s["PASSWORD"] or None,
    }
    name = f"{s['NAME']}_wheel"[:63]
    admin = {k: v for k, v in server.items() if v is not None}
    with psycopg.connect(**admin, dbname="postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "HOST": server["host"],
        "PORT": str(server["port"]),
        "USER": server["user"],
        "PASSWORD": s["PASSWORD"] or "",
    }
    (tmp_path / "smoke_settings.py").write_text(SETTINGS.format(database=database))
    for path, text in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(textwrap.dedent(text))
    try:
        yield tmp_path
    finally:
        with psycopg.connect(**admin, dbname="postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_installed_wheel_runs_a_project(
    installed: Installed, project: Path, dists: Dists
) -> None:
    venv_python = installed.python
    env = _clean_env(DJANGO_SETTINGS_MODULE="smoke_settings")
    started = time.monotonic()

    def manage(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return run([venv_python, "manage.py", *args], cwd=project, env=env, timeout=180, ok=ok)

    # 1. The package comes from the virtualenv's site-packages, not from the repository.
    where = run(
        [
            venv_python,
            "-c",
            "import django, django_pgjobs; print(django_pgjobs.__file__);"
            " print(django_pgjobs.__version__); print(django.get_version())",
        ],
        cwd=project,
        env=env,
        timeout=60,
    ).stdout.split()
    site = venv_python.parent.parent / "lib"
    assert Path(where[0]).is_relative_to(site), where
    assert not Path(where[0]).is_relative_to(ROOT), where
    assert where[1] == VERSION
    # Not editable: no .pth file or finder pointing back at the work tree.
    shown = run(
        [venv_python, "-m", "pip", "show", "-f", "django-pgjobs"], cwd=project, env=env, timeout=60
    ).stdout
    assert "Editable project location" not in shown and str(ROOT) not in shown

    # 2. The system checks, then the migrations shipped in the wheel.
    manage("check")
    migrate = manage("migrate", "--noinput")
    assert "Applying django_pgjobs.0001_initial... OK" in migrate.stdout, migrate.stdout
    assert "No migrations to apply" in manage("migrate", "--noinput").stdout
    assert (
        "No changes detected"
        in manage("makemigrations", "--check", "--dry-run", "django_pgjobs").stdout
    )

    # 3. Enqueue one job, run a worker until nothing is due.
    enqueued = manage(
        "shell",
        "-c",
        "from django_pgjobs import enqueue; "
        "print('ENQUEUED', enqueue('smoke.add', {'a': 2, 'b': 3}).id)",
    )
    assert re.search(r"^ENQUEUED \d+$", enqueued.stdout, re.MULTILINE), enqueued.stdout
    worker = manage("runjobs", "--burst", "--concurrency", "2")
    assert re.search(r"job\.completed smoke\.add#\d+ ", worker.stderr), worker.stderr
    assert "stopped: 1 jobs finished" in worker.stderr, worker.stderr

    # 4. The health check, with the version.
    health = manage("pgjobs_health", "--json", "--min-dead-tuples", "2000000000")
    doc = json.loads(health.stdout)
    assert doc["version"] == VERSION and doc["healthy"] is True, doc["problems"]
    assert manage("pgjobs_health").stdout.splitlines()[0] == f"django-pgjobs {VERSION}"

    # 5. The job's outcome and the admin pages (templates from the wheel).
    checked = manage("shell", "-c", CHECK_JOB_AND_ADMIN).stdout
    job = json.loads(re.search(r"^JOB (.*)$", checked, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert job == {"status": "COMPLETED", "result": {"sum": 5}, "attempts": 1}, job
    pages = re.findall(r"^PAGE (\S+) (\d+)$", checked, re.MULTILINE)
    assert len(pages) == 3 and all(code == "200" for _, code in pages), pages
    dashboard = checked.split("DASHBOARD ", 1)[1]
    assert 'id="pgjobs-queues"' in dashboard and "pgjobs-chart" in dashboard
    assert f">django-pgjobs {VERSION}</p>" in dashboard

    print(
        f"\nwheel smoke test: build {dists.build_seconds:.1f} s, venv + pip install "
        f"{installed.install_seconds:.1f} s, project steps {time.monotonic() - started:.1f} s"
    )
