#!/usr/bin/env python3
"""A/B of two revisions of django-pgjobs, their runs interleaved:

    python3 bench/ab.py --before REV --after REV|PATH [--rounds 3] [--quick|--full]
                        [--metrics drain_w1,drain_w2,enqueue_single,enqueue_bulk,pickup]
                        [harness options: --retries 0, --pgjobs-args=..., --pg-url ...]

Each revision is checked out into a throwaway git worktree, bench/.ab/<commit> (a PATH,
e.g. a work tree with uncommitted changes, is used as it is), and installed editable into
its own environment, bench/.venvs/pgjobs-ab-<commit> (or pgjobs-ab-path-<hash>).  Then
bench/harness.py (the measuring code of *this* checkout, the same for both sides) measures
django-pgjobs alone, one run per side and round, in the order A B, B A, A B, ... so that the
drift of a shared machine falls on both sides alike.  Each run's value of a metric is the
median of that run's samples (one in --quick); across the rounds: medians, min-max, the
ratio B/A of the medians and the range of the per-round ratios B_i/A_i.

Verdict per metric: "worse beyond the spread" when B's median is worse than A's worst
round, i.e. median(B) < min(A) for throughputs (jobs/s), median(B) > max(A) for latencies
(pickup p50/p99, ms); "better beyond the spread" in the mirror case; otherwise "within the
spread".

Results: bench/results/ab.json (every sample of every run, the revisions, the machine) and
bench/results/ab.md.  Works with any python3 (stdlib only), like run.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from benchlib import envs  # noqa: E402

REPO = envs.REPO_DIR
AB_DIR = BENCH / ".ab"
RESULTS = BENCH / "results"

# metric -> [(row, key in a sample, unit, higher is better)]
ROWS = {
    "drain_w1": [("drain_w1", "rate", "jobs/s", True)],
    "drain_w2": [("drain_w2", "rate", "jobs/s", True)],
    "enqueue_single": [("enqueue_single", "rate", "jobs/s", True)],
    "enqueue_bulk": [("enqueue_bulk", "rate", "jobs/s", True)],
    "pickup": [("pickup_p50", "p50", "ms", False), ("pickup_p99", "p99", "ms", False)],
}
DEFAULT_METRICS = "drain_w1,drain_w2,enqueue_single,enqueue_bulk,pickup"
DRAIN_N = {"quick": 3_000, "full": 20_000}  # harness.MODES' drain_n: fixed on both sides
RESERVED = ("--only", "--metrics", "--out", "--pgjobs-src", "--pgjobs-venv", "--report-only")


def log(msg: str) -> None:
    print(f"[ab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def git(*args: str, cwd: Path = REPO, check: bool = True) -> str:
    res = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=120
    )
    if check and res.returncode != 0:
        raise SystemExit(f"ab: git {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout.strip()


def code_hash(src: Path) -> str:
    """Content of what is measured (django_pgjobs/ and pyproject.toml): shows a work tree
    that changed between rounds."""
    h = hashlib.sha256()
    files = sorted(
        p
        for p in (src / "django_pgjobs").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    for p in files + [src / "pyproject.toml"]:
        if p.exists():
            h.update(str(p.relative_to(src)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def prepare(spec: str) -> dict:
    """A revision (or a path to a work tree) -> {spec, src, venv, commit, ...}."""
    path = Path(spec).expanduser()
    if path.is_dir():
        src = path.resolve()
        if not (src / "django_pgjobs" / "__init__.py").exists():
            raise SystemExit(f"ab: {src} has no django_pgjobs/__init__.py")
        head = git("rev-parse", "HEAD", cwd=src, check=False)
        dirty = git(
            "status", "--porcelain", "--", "django_pgjobs", "pyproject.toml", cwd=src, check=False
        )
        tag = "path-" + hashlib.sha256(str(src).encode()).hexdigest()[:8]
        return {
            "spec": spec,
            "kind": "path",
            "src": str(src),
            "commit": head or None,
            "uncommitted_changes": bool(dirty),
            "venv": f"pgjobs-ab-{tag}",
            "label": f"{src}"
            + (f" ({head[:10]}{' + uncommitted' if dirty else ''})" if head else ""),
        }
    commit = git("rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}", check=False)
    if not commit:
        raise SystemExit(f"ab: {spec!r} is neither a directory nor a revision of {REPO}")
    short = commit[:12]
    wt = AB_DIR / short
    if (wt / ".git").exists():
        if git("rev-parse", "HEAD", cwd=wt, check=False) != commit or git(
            "status", "--porcelain", "--untracked-files=no", cwd=wt, check=False
        ):
            log(f"{wt}: not a clean checkout of {short}; resetting it")
            git("checkout", "--force", "--detach", commit, cwd=wt)
    else:
        AB_DIR.mkdir(parents=True, exist_ok=True)
        git("worktree", "prune")
        log(f"git worktree {wt} ({spec} = {short})")
        git("worktree", "add", "--force", "--detach", str(wt), commit)
    if not (wt / "django_pgjobs" / "__init__.py").exists():
        raise SystemExit(f"ab: revision {spec} ({short}) has no django_pgjobs/")
    subject = git("log", "-1", "--format=%s", commit)
    return {
        "spec": spec,
        "kind": "revision",
        "src": str(wt),
        "commit": commit,
        "subject": subject,
        "venv": f"pgjobs-ab-{short}",
        "label": f"{spec} = {short} {subject[:60]}",
    }


def one_run(
    core: str,
    side: dict,
    tag: str,
    mode: str,
    metrics: list[str],
    drain_n: int,
    db: str,
    passthrough: list[str],
    out: Path,
) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        core,
        str(BENCH / "harness.py"),
        f"--{mode}",
        "--only",
        "pgjobs",
        "--metrics",
        ",".join(metrics),
        "--out",
        str(out),
        "--no-report",
        "--pgjobs-src",
        side["src"],
        "--pgjobs-venv",
        side["venv"],
        "--pgjobs-db",
        db,
        "--drain-n",
        str(drain_n),
        *passthrough,
    ]
    env = dict(os.environ, PYTHONPATH=str(BENCH))
    env.pop("PYTHONHOME", None)
    env.pop("BENCH_PROJECT_DIR", None)
    before = code_hash(Path(side["src"]))
    t0 = time.monotonic()
    with open(out / "harness.log", "w") as lg:
        # cwd: the side's checkout, so that a `python -c` of the harness (settings_note) cannot
        # import another django_pgjobs from the current directory
        p = subprocess.Popen(
            argv,
            env=env,
            cwd=side["src"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            for line in p.stdout:
                lg.write(line)
                sys.stderr.write(f"  {tag} | {line}")
            rc = p.wait()
        except BaseException:
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
            raise
    elapsed = time.monotonic() - t0
    res_path = out / "latest.json"
    if rc != 0 or not res_path.exists():
        return {
            "rc": rc,
            "elapsed_s": elapsed,
            "errors": [f"harness exited {rc} (see {out}/harness.log)"],
            "metrics": {},
            "code_hash": before,
        }
    res = json.loads(res_path.read_text())
    pg = res["systems"].get("pgjobs", {})
    after = code_hash(Path(side["src"]))
    errors = list(pg.get("errors", []))
    if pg.get("skipped"):
        errors.append(f"skipped: {pg['skipped']}")
    if after != before:
        errors.append(f"the code in {side['src']} changed during the run ({before} -> {after})")
    return {
        "rc": rc,
        "elapsed_s": elapsed,
        "errors": errors,
        "metrics": pg.get("metrics", {}),
        "versions": pg.get("versions", {}),
        "settings": pg.get("settings", ""),
        "drain_n": pg.get("drain_n"),
        "config": res.get("config"),
        "machine": res.get("machine"),
        "code_hash": before,
        "log": str(out / "harness.log"),
    }


def run_value(run: dict, metric: str, key: str) -> float | None:
    samples = run["metrics"].get(metric, {}).get("samples", [])
    vals = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(vals) if vals else None


def analyse(result: dict) -> list[dict]:
    rows = []
    for metric in result["metrics"]:
        for row, key, unit, higher in ROWS[metric]:
            a, b, ratios = [], [], []
            for rnd in result["rounds"]:
                va, vb = run_value(rnd["A"], metric, key), run_value(rnd["B"], metric, key)
                if va is not None:
                    a.append(va)
                if vb is not None:
                    b.append(vb)
                if va and vb is not None:
                    ratios.append(vb / va)
            r = {
                "metric": row,
                "unit": unit,
                "higher_is_better": higher,
                "A": a,
                "B": b,
                "round_ratios": ratios,
            }
            if a and b:
                ma, mb = statistics.median(a), statistics.median(b)
                worse = mb < min(a) if higher else mb > max(a)
                better = mb > max(a) if higher else mb < min(a)
                r.update(
                    A_median=ma,
                    B_median=mb,
                    ratio=mb / ma if ma else None,
                    rounds_worse=sum(1 for x in ratios if (x < 1 if higher else x > 1)),
                    verdict="worse beyond the spread"
                    if worse
                    else "better beyond the spread"
                    if better
                    else "within the spread",
                )
                if len(a) < 2:  # A's range is one value: any difference is "beyond" it
                    r["verdict"] += " (1 round: no spread)"
            else:
                r["verdict"] = "no data"
            rows.append(r)
    return rows


def fmt(v: float, unit: str) -> str:
    if unit == "ms":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def render_md(result: dict) -> str:
    rows = result["analysis"]
    n = len(result["rounds"])
    lines = [
        "# A/B: django-pgjobs, two revisions, interleaved runs",
        "",
        f"- A (before): {result['A']['label']}",
        f"- B (after): {result['B']['label']}",
        f"- {n} round(s) of `--{result['mode']}` runs, order "
        + ", ".join("A B" if i % 2 == 0 else "B A" for i in range(n))
        + f"; drains of {result.get('drain_n')} jobs; {result['date']}, "
        f"{result['machine'].get('cpu_model', '?')} ({result['machine'].get('cores')} cores), "
        f"PostgreSQL {result['machine'].get('postgres', {}).get('version', '?')}; "
        f"{result['elapsed_s'] / 60:.1f} min",
        f"- command: `{result['command']}`",
        "",
        "| metric | better | A median (min–max) | B median (min–max) | B/A | per-round B/A "
        "| rounds B worse | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        u = r["unit"]
        if r["verdict"] == "no data":
            lines.append(f"| {r['metric']} ({u}) | | – | – | | | | no data |")
            continue
        rr = r["round_ratios"]
        verdict = f"**{r['verdict']}**" if r["verdict"].startswith("worse") else r["verdict"]
        lines.append(
            f"| {r['metric']} ({u}) | {'higher' if r['higher_is_better'] else 'lower'} "
            f"| {fmt(r['A_median'], u)} ({fmt(min(r['A']), u)}–{fmt(max(r['A']), u)}) "
            f"| {fmt(r['B_median'], u)} ({fmt(min(r['B']), u)}–{fmt(max(r['B']), u)}) "
            f"| {r['ratio']:.3f} | {min(rr):.3f}–{max(rr):.3f} | {r['rounds_worse']}/{len(rr)} "
            f"| {verdict} |"
        )
    lines += [
        "",
        "Each run's value is the median of that run's samples; medians and min–max are over the "
        "runs. \"worse beyond the spread\": B's median below A's minimum (jobs/s) or above A's "
        "maximum (ms). B/A > 1 is better for jobs/s, worse for ms.",
    ]
    if n < 3:
        lines.append(
            f"With {n} round(s) A's range is {'one value' if n == 1 else 'two values'}: "
            "the verdicts say little (take at least 3 rounds)."
        )
    notes = []
    for i, rnd in enumerate(result["rounds"], 1):
        for side in ("A", "B"):
            for e in rnd[side]["errors"]:
                notes.append(f"round {i} {side}: {e}")
    limit = result.get("foreign_limit", 0.2)
    for i, rnd in enumerate(result["rounds"], 1):
        for side in rnd["order"]:
            for metric, m in rnd[side]["metrics"].items():
                loads = [s.get("foreign_cpu_cores", 0) for s in m.get("samples", [])]
                if metric in result["metrics"] and loads and max(loads) > limit:
                    notes.append(
                        f"round {i} {side}: {metric} kept a sample taken while other work "
                        f"used {max(loads):.2f} cores (limit {limit}, retries spent)"
                    )
    for side in ("A", "B"):
        hashes = {rnd[side]["code_hash"] for rnd in result["rounds"]}
        if len(hashes) > 1:
            notes.append(
                f"{side}'s code changed between rounds (content hashes {', '.join(sorted(hashes))})"
            )
    if result["A"]["src"] == result["B"]["src"]:
        notes.append("A and B are the same checkout (an A/A run: the spread of unchanged code)")
    if notes:
        lines += ["", "Problems:", ""] + [f"- {x}" for x in notes]
    lines += ["", "Runs:", ""]
    for i, rnd in enumerate(result["rounds"], 1):
        order = rnd["order"]
        lines.append(
            f"- round {i} ({' '.join(order)}): "
            + "; ".join(f"{s} {rnd[s]['elapsed_s']:.0f}s" for s in order)
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ap = argparse.ArgumentParser(
        prog="bench/ab.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--before", required=True, metavar="REV|PATH", help="side A")
    ap.add_argument(
        "--after", required=True, metavar="REV|PATH", help="side B (a path: a work tree as it is)"
    )
    ap.add_argument("--rounds", type=int, default=3, help="pairs of runs (default 3)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="the harness's quick mode (default)")
    g.add_argument(
        "--full", action="store_true", help="the harness's full mode (3 samples per run)"
    )
    ap.add_argument("--metrics", default=DEFAULT_METRICS, help=f"default: {DEFAULT_METRICS}")
    ap.add_argument(
        "--drain-n",
        type=int,
        metavar="JOBS",
        help="jobs per drain, the same on both sides (default: quick 3,000, full 20,000)",
    )
    ap.add_argument(
        "--db", default="bench_pgjobs_ab", help="database of both sides (default bench_pgjobs_ab)"
    )
    ap.add_argument("--out", default=str(RESULTS), help="directory for ab.json and ab.md")
    ap.add_argument(
        "--prune",
        action="store_true",
        help="remove bench/.ab worktrees and pgjobs-ab-* environments, then exit",
    )
    args, rest = ap.parse_known_args(argv)
    bad = [a for a in rest if a.split("=")[0] in RESERVED]
    if bad:
        ap.error(f"ab.py sets these harness options itself: {' '.join(bad)}")
    return args, rest


def foreign_limit(passthrough: list[str]) -> float:
    """The harness's --foreign-limit among the options passed through (default 0.2)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--foreign-limit", type=float, default=0.2)
    return ap.parse_known_args(passthrough)[0].foreign_limit


def prune() -> None:
    import shutil

    for d in sorted(AB_DIR.glob("*")) if AB_DIR.is_dir() else []:
        if (d / ".git").is_file():
            log(f"removing worktree {d}")
            git("worktree", "remove", "--force", str(d), check=False)
    git("worktree", "prune")
    for v in sorted(envs.VENVS_DIR.glob("pgjobs-ab-*")) if envs.VENVS_DIR.is_dir() else []:
        log(f"removing environment {v}")
        shutil.rmtree(v, ignore_errors=True)
    shutil.rmtree(AB_DIR / "runs", ignore_errors=True)


def main(argv: list[str]) -> int:
    args, passthrough = parse_args(argv)
    if args.prune:
        prune()
        return 0
    mode = "full" if args.full else "quick"
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    unknown = [m for m in metrics if m not in ROWS]
    if unknown:
        raise SystemExit(
            f"ab: unknown metric(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}"
        )
    if args.rounds < 1:
        raise SystemExit("ab: --rounds must be at least 1")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the harness child is stopped too
    t0 = time.monotonic()
    sides = {"A": prepare(args.before), "B": prepare(args.after)}
    base = envs.find_python()
    core = str(envs.ensure_venv("core", base))
    for k, side in sides.items():  # built before round 1: no install between measured runs
        log(f"{k}: {side['label']}: environment bench/.venvs/{side['venv']}")
        envs.ensure_venv(side["venv"], base, req_name="pgjobs", project_dir=side["src"])
        side["code_hash"] = code_hash(Path(side["src"]))
    drain_n = args.drain_n or DRAIN_N[mode]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs_dir = AB_DIR / "runs" / stamp
    result = {
        "schema": 1,
        "mode": mode,
        "metrics": metrics,
        "drain_n": drain_n,
        "command": "python3 bench/ab.py " + " ".join(argv),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "bench_commit": git("rev-parse", "HEAD", check=False),
        "harness_args": passthrough,
        "A": sides["A"],
        "B": sides["B"],
        "rounds": [],
        "machine": {"host": platform.node(), "cores": os.cpu_count()},
        "foreign_limit": foreign_limit(passthrough),
        "rule": "worse beyond the spread: median(B) < min(A) for jobs/s, median(B) > max(A) for ms",
    }
    log(f"{args.rounds} round(s), --{mode}, metrics {','.join(metrics)}; runs in {runs_dir}")
    for i in range(args.rounds):
        order = ["A", "B"] if i % 2 == 0 else ["B", "A"]
        rnd: dict = {"order": order}
        for k in order:
            log(f"round {i + 1}/{args.rounds}: {k}")
            rnd[k] = one_run(
                core,
                sides[k],
                f"r{i + 1} {k}",
                mode,
                metrics,
                drain_n,
                args.db,
                passthrough,
                runs_dir / f"r{i + 1}-{k}",
            )
            rnd[k]["loadavg_after"] = os.getloadavg()
            for e in rnd[k]["errors"]:
                log(f"round {i + 1} {k}: {e}")
        result["rounds"].append(rnd)
    machine = next(
        (r[k]["machine"] for r in result["rounds"] for k in "AB" if r[k].get("machine")), None
    )
    if machine:
        result["machine"].update(machine)
    result["elapsed_s"] = time.monotonic() - t0
    result["analysis"] = analyse(result)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab.json").write_text(json.dumps(result, indent=1) + "\n")
    md = render_md(result)
    (out / "ab.md").write_text(md)
    log(f"wrote {out / 'ab.json'} and {out / 'ab.md'} ({result['elapsed_s'] / 60:.1f} min)")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
