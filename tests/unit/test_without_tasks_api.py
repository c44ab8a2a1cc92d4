"""On Django 5.2 without the django-tasks backport (no Tasks framework at all), everything but
the Tasks backend works, and configuring the backend gives an error naming the package."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import sys

    class NoTasks:  # as if neither django.tasks nor django_tasks were installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "django_tasks" or name.startswith("django.tasks"):
                raise ImportError(f"No module named {name!r}")

    sys.meta_path.insert(0, NoTasks())
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_pgjobs"],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}},
        TASKS={"default": {"BACKEND": "django_pgjobs.backend.PgJobsBackend"}},
    )
    django.setup()
    import django_pgjobs.testing, django_pgjobs.worker  # noqa: E401,F401 - they import
    from django.core import checks
    from django_pgjobs import enqueue, handler  # noqa: F401
    print("checks:", sorted(e.id for e in checks.run_checks() if e.id.startswith("pgjobs")))
    try:
        import django_pgjobs.backend  # noqa: F401
    except Exception as exc:
        print("backend:", type(exc).__name__, exc)
""")


def test_everything_but_the_tasks_backend_works_without_a_tasks_framework():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert lines["checks"] == "['pgjobs.E014']"
    assert lines["backend"].startswith("ImproperlyConfigured ")
    assert "pip install 'django-pgjobs[tasks]'" in lines["backend"]
