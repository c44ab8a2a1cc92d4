"""Virtual environments for the benchmark (stdlib only: also imported by run.py under 3.11).

Every system gets its own environment under bench/.venvs/<name> so that peers never
become dependencies of django-pgjobs.  An environment is (re)built only when its
requirement file, the interpreter or the install recipe changed: a marker file holds
a hash of those inputs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = BENCH_DIR.parent
VENVS_DIR = BENCH_DIR / ".venvs"
REQ_DIR = BENCH_DIR / "requirements"
MIN_PY = (3, 12)
RECIPE_VERSION = "3"  # bump to force every environment to be rebuilt
PIP_TIMEOUT = 900  # seconds, per pip/npm invocation


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _py_version(exe: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def find_python() -> str:
    """A Python >= 3.12 interpreter: $BENCH_PYTHON, python3.1x on PATH, then pyenv versions."""
    candidates: list[str] = []
    if os.environ.get("BENCH_PYTHON"):
        candidates.append(os.environ["BENCH_PYTHON"])
    if sys.version_info[:2] >= MIN_PY:
        candidates.append(sys.executable)
    for minor in (12, 13, 14):
        exe = shutil.which(f"python3.{minor}")
        if exe:
            candidates.append(exe)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    if pyenv_root.is_dir():
        found = []
        for d in pyenv_root.iterdir():
            m = re.fullmatch(r"3\.(\d+)\.(\d+)", d.name)
            if m and (3, int(m.group(1))) >= MIN_PY and (d / "bin" / "python").exists():
                found.append(((int(m.group(1)), int(m.group(2))), str(d / "bin" / "python")))
        # prefer 3.12 (what the package targets first), then newer ones
        found.sort(key=lambda t: (t[0][0] != 12, t[0]))
        candidates += [exe for _, exe in found]
    for exe in candidates:
        v = _py_version(exe)
        if v and v >= MIN_PY:
            return exe
    raise SystemExit(
        "bench: no Python >= 3.12 found; set BENCH_PYTHON=/path/to/python3.12 and retry"
    )


def venv_python(name: str) -> Path:
    return VENVS_DIR / name / "bin" / "python"


def _hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _run(cmd: list[str], **kw) -> None:
    log("$ " + " ".join(cmd))
    res = subprocess.run(cmd, timeout=PIP_TIMEOUT, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        sys.stderr.write(res.stdout[-4000:] + res.stderr[-4000:])
        raise RuntimeError(f"command failed ({res.returncode}): {' '.join(cmd)}")


def ensure_venv(
    name: str,
    base_python: str,
    requirements: list[str] | None = None,
    *,
    req_name: str | None = None,
    project_dir: str | Path | None = None,
) -> Path:
    """Create/refresh bench/.venvs/<name> from requirements/<req_name or name>.txt (+ extra
    lines); "-e" lines are resolved against project_dir (default: $BENCH_PROJECT_DIR or the
    repository), e.g. another checkout of django-pgjobs in its own environment (bench/ab.py)."""
    req_file = REQ_DIR / f"{req_name or name}.txt"
    lines = [ln.strip() for ln in req_file.read_text().splitlines()] if req_file.exists() else []
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    lines += requirements or []
    # "-e ." style lines are relative to the repository root (or $BENCH_PROJECT_DIR, to
    # benchmark another checkout of django-pgjobs)
    project_dir = Path(project_dir or os.environ.get("BENCH_PROJECT_DIR", REPO_DIR))
    resolved = []
    for ln in lines:
        if ln.startswith("-e "):
            target = (project_dir / ln[3:].strip()).resolve()
            resolved += ["-e", str(target)]
        else:
            resolved.append(ln)
    vdir = VENVS_DIR / name
    marker = vdir / ".bench-env.json"
    # an editable project is reinstalled when its declared dependencies change
    project_files = []
    for i, ln in enumerate(resolved):
        if ln == "-e":
            pyproject = Path(resolved[i + 1]) / "pyproject.toml"
            if pyproject.exists():
                project_files.append(pyproject.read_text())
    digest = _hash(RECIPE_VERSION, os.path.realpath(base_python), *resolved, *project_files)
    if marker.exists():
        try:
            if (
                json.loads(marker.read_text()).get("digest") == digest
                and venv_python(name).exists()
            ):
                return venv_python(name)
        except ValueError:
            pass
    log(f"building environment {vdir} (first run or requirements changed)")
    if vdir.exists():
        shutil.rmtree(vdir)
    VENVS_DIR.mkdir(parents=True, exist_ok=True)
    _run([base_python, "-m", "venv", str(vdir)])
    pip = [str(venv_python(name)), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + ["--upgrade", "pip"])
    if resolved:
        _run(pip + resolved)
    marker.write_text(json.dumps({"digest": digest, "requirements": resolved}))
    return venv_python(name)


def venv_versions(name: str, packages: list[str]) -> dict[str, str]:
    """Installed versions of some distributions inside a venv."""
    code = (
        "import json,sys,importlib.metadata as m\n"
        "out={}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p]=m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    try:
        res = subprocess.run(
            [str(venv_python(name)), "-c", code, *packages],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return json.loads(res.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}


def ensure_node_env(name: str, package_json: Path) -> Path | None:
    """npm install the dependencies of package_json into bench/.venvs/<name>; None without node."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        return None
    vdir = VENVS_DIR / name
    spec = package_json.read_text()
    node_version = subprocess.run(
        [node, "--version"], capture_output=True, text=True
    ).stdout.strip()
    digest = _hash(RECIPE_VERSION, spec, node_version)
    marker = vdir / ".bench-env.json"
    if marker.exists() and (vdir / "node_modules").is_dir():
        try:
            if json.loads(marker.read_text()).get("digest") == digest:
                return vdir
        except ValueError:
            pass
    log(f"building node environment {vdir}")
    if vdir.exists():
        shutil.rmtree(vdir)
    vdir.mkdir(parents=True)
    shutil.copy(package_json, vdir / "package.json")
    _run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=vdir)
    marker.write_text(json.dumps({"digest": digest}))
    return vdir


def run_in_core(script: str) -> None:
    """Re-run ``script`` (with this process's arguments) inside bench/.venvs/core; returns at
    once when already there (bloat.py, scale.py)."""
    if os.environ.get("BENCH_CORE_INNER") != "1":
        exec_in_core(script)


def exec_in_core(script: str) -> None:
    """Replace this process with ``script`` run by bench/.venvs/core's Python (built first if
    needed), with this process's arguments and bench/ on its path."""
    base = find_python()
    core = ensure_venv("core", base)
    bench = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, BENCH_PYTHON=base, PYTHONPATH=bench, BENCH_CORE_INNER="1")
    env.pop("PYTHONHOME", None)
    os.execve(str(core), [str(core), script, *sys.argv[1:]], env)
