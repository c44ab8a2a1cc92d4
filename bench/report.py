"""Render bench/results/latest.json into latest.md (tables, ratios, targets) and latest.png."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PGJOBS, RAW = "pgjobs", "raw_limit"

THROUGHPUT = [
    ("enqueue_single", "enqueue single (1 job/tx)"),
    ("enqueue_bulk", "enqueue bulk"),
    ("drain_w1", "drain, 1 worker"),
    ("drain_w2", "drain, 2 workers"),
    ("drain_w1_finished", "drain, 1 worker, over finished rows"),
]


def med(samples: list[dict], key: str) -> tuple[float, float, float] | None:
    vals = [s[key] for s in samples if s.get(key) is not None]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def metric(res: dict, system: str, name: str, key: str = "rate"):
    s = res["systems"].get(system, {}).get("metrics", {}).get(name)
    return med(s["samples"], key) if s else None


def fmt_rate(v: float) -> str:
    if v >= 100_000:
        return f"{v / 1000:,.0f}k"
    if v >= 10_000:
        return f"{v / 1000:,.1f}k"
    return f"{v:,.0f}"


def fmt_ms(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:,.0f}"


def cell(m, f=fmt_rate, spread=True) -> str:
    if m is None:
        return "—"
    mid, lo, hi = m
    if not spread or lo == hi:
        return f(mid)
    return f"{f(mid)} <sub>{f(lo)}–{f(hi)}</sub>"


def ratio(a, b) -> str:
    if a is None or b is None or b[0] == 0:
        return "—"
    r = a[0] / b[0]
    if r >= 100:
        return f"{r:,.0f}×"
    if r >= 0.1:
        return f"{r:.2f}×"
    return f"{r:.2g}×"


def targets(res: dict) -> list[tuple[str, str, str, bool | None]]:
    """(target, measured, threshold, passed)"""
    out = []

    def ratio(a, b) -> str:
        return f"{a[0] / b[0]:.2f}× ({fmt_rate(a[0])} vs {fmt_rate(b[0])} jobs/s)"

    def rel(name, a, b, threshold, label_b):
        if a is None or b is None:
            out.append(
                (
                    name,
                    "n/a (missing: " + ("django-pgjobs" if a is None else label_b) + ")",
                    f">= {threshold}×",
                    None,
                )
            )
            return
        out.append((name, ratio(a, b), f">= {threshold}×", a[0] / b[0] >= threshold))

    def info(name, a, b):  # a ratio shown beside the targets, judged by none
        if a is not None and b is not None:
            out.append((f"(info) {name}", ratio(a, b), "—", None))

    def turns(name, a, b):  # two series measured in turns: the ratio within each turn
        sa, sb = (res["systems"].get(k, {}).get("metrics", {}).get(m) for k, m in (a, b))
        if not sa or not sb or len(sa["samples"]) != len(sb["samples"]) or len(sa["samples"]) < 2:
            return
        r = sorted(x["rate"] / y["rate"] for x, y in zip(sa["samples"], sb["samples"], strict=True))
        out.append(
            (
                f"(info) {name}, turn by turn",
                f"median {statistics.median(r):.2f}× ({r[0]:.2f}–{r[-1]:.2f}×, {len(r)} turns)",
                "—",
                None,
            )
        )

    # The fastest peer per metric (the raw systems are limits, not peers).
    def fastest_peer(name):
        best = None
        for key, sysres in res["systems"].items():
            m = metric(res, key, name) if key not in (PGJOBS, RAW, "raw_perjob") else None
            if m is not None and (best is None or m[0] > best[1][0]):
                best = (sysres.get("label", key), m)
        return best or (None, None)

    w2 = metric(res, PGJOBS, "drain_w2")
    peer, best = fastest_peer("drain_w2")
    rel(f"drain_w2 vs the fastest peer ({peer or 'none'})", w2, best, 1.5, "peers")
    rel("drain_w2 vs raw limit", w2, metric(res, RAW, "drain_w2"), 0.6, "raw limit")
    rel(
        "drain_w1 vs PgQueuer",
        metric(res, PGJOBS, "drain_w1"),
        metric(res, "pgqueuer", "drain_w1"),
        2.0,
        "PgQueuer",
    )
    single, plain = metric(res, PGJOBS, "enqueue_single"), metric(res, RAW, "enqueue_single_plain")
    peer, best = fastest_peer("enqueue_single")
    rel(f"enqueue single vs the fastest peer ({peer or 'none'})", single, best, 1.3, "peers")
    # enqueue() against the INSERT it sends, from raw psycopg into the same table: what the
    # library's Python costs a one-job transaction (the schema's guarantees cost the same to both)
    sql_only = metric(res, PGJOBS, "enqueue_single_sql")
    rel(
        "enqueue single vs its INSERT from raw psycopg",
        single,
        sql_only,
        0.95,
        "enqueue_single_sql",
    )
    if (res["systems"].get(PGJOBS, {}).get("metrics", {}).get("enqueue_single") or {}).get(
        "interleaved"
    ):  # measured in turns with the other single enqueues
        turns(
            "enqueue single vs its INSERT from raw psycopg",
            (PGJOBS, "enqueue_single"),
            (PGJOBS, "enqueue_single_sql"),
        )
    # Retired as a target (the schema's guarantees cost what they cost): the bare 8-column
    # INSERT without trigger, and with the raw limit's statement NOTIFY trigger.
    info("enqueue single vs raw single INSERT (retired target)", single, plain)
    info("enqueue single vs raw INSERT + NOTIFY", single, metric(res, RAW, "enqueue_single"))
    info("django-pgjobs' INSERT from raw psycopg vs raw single INSERT", sql_only, plain)
    rel(
        "enqueue_many vs pg-boss bulk",
        metric(res, PGJOBS, "enqueue_bulk"),
        metric(res, "pgboss", "enqueue_bulk"),
        1.5,
        "pg-boss",
    )
    for key, limit in (("p50", 1.5), ("p99", 10.0)):
        m = metric(res, PGJOBS, "pickup", key)
        if m is None:
            out.append((f"pickup {key}", "n/a", f"<= {limit} ms", None))
        else:
            out.append((f"pickup {key}", f"{m[0]:.2f} ms", f"<= {limit} ms", m[0] <= limit))
    # Over finished rows against the empty table: the same drains on a twin table without the
    # finished rows, taking turns with them (drain_w1_alongside), when measured; the ratio
    # against drain_w1 (TRUNCATE before each, minutes earlier) stays as information.
    fin = res.get("config", {}).get("finished_rows", 0)
    finished, before = metric(res, PGJOBS, "drain_w1_finished"), metric(res, PGJOBS, "drain_w1")
    alongside = metric(res, PGJOBS, "drain_w1_alongside")
    rel(
        f"drain_w1 over {fin:,} finished rows vs "
        + (
            "the same drains without them (twin table, taking turns)"
            if alongside
            else "empty table"
        ),
        finished,
        alongside or before,
        0.9,
        "empty-table drain",
    )
    if alongside:
        turns(
            f"drain_w1 over {fin:,} finished rows vs the same drains without them",
            (PGJOBS, "drain_w1_finished"),
            (PGJOBS, "drain_w1_alongside"),
        )
        info(
            f"drain_w1 over {fin:,} finished rows vs drain_w1, measured before them",
            finished,
            before,
        )
    rss = []
    for name in ("drain_w1", "drain_w2", "drain_w1_finished"):
        s = res["systems"].get(PGJOBS, {}).get("metrics", {}).get(name)
        if s:
            rss += [x["rss_mb"] for x in s["samples"]]
    if rss:
        out.append(("worker peak RSS", f"{max(rss):.0f} MB", "<= 120 MB", max(rss) <= 120))
    else:
        out.append(("worker peak RSS", "n/a", "<= 120 MB", None))
    soaked = res["systems"].get(PGJOBS, {}).get("metrics", {}).get("soak")
    if soaked:
        s = soaked["samples"][0]
        series = s["rss_mb_after_round"]
        # "no growth": the resident size after the last round within 5 MB of the first round's
        out.append(
            (
                f"no RSS growth over a {s['n']:,}-job soak",
                f"{series[0]:.0f} -> {series[-1]:.0f} MB ({s['growth_mb']:+.1f} MB)",
                "<= +5 MB",
                s["growth_mb"] <= 5.0,
            )
        )
    else:
        out.append(("no RSS growth over the soak", "n/a", "<= +5 MB", None))
    return out


def render_md(res: dict) -> str:
    mach = res["machine"]
    pg = mach.get("postgres", {})
    cfg = res["config"]
    systems = [k for k in res["systems"]]
    label = {k: v["label"] for k, v in res["systems"].items()}
    L = []
    L.append("# django-pgjobs benchmark\n")
    L.append(
        f"`{res.get('command', 'python3 bench/run.py')}` — {res['mode']} mode, "
        f"{cfg['reps']} repetition(s) per number, medians with <sub>min–max</sub>.\n"
    )
    L.append(f"- **Date:** {mach['date']}  ")
    L.append(
        f"- **Machine:** {mach['cpu_model']}, {mach['cores']} cores, {mach['mem_gb']} GB RAM, "
        f"Linux {mach['kernel']}  "
    )
    L.append(
        f"- **PostgreSQL:** {pg.get('version')} on 127.0.0.1 (shared_buffers {pg.get('shared_buffers')}, "
        f"synchronous_commit {pg.get('synchronous_commit')}, fsync {pg.get('fsync')}, "
        f"autovacuum {pg.get('autovacuum')})  "
    )
    L.append(f"- **Runtimes:** {mach.get('python')}, node {mach.get('node') or 'absent'}  ")
    capped = [
        f"{v['label']} {v['drain_n']:,}"
        for v in res["systems"].values()
        if v.get("drain_n") and v["drain_n"] < cfg["drain_n"]
    ]
    turns = max(cfg["reps"], cfg.get("single_turns", cfg["reps"]))
    block = cfg.get("single_block")
    L.append(
        f"- **Counts:** enqueue single {cfg['enqueue_single_n']:,} jobs × {turns} turns"
        + (f" (in blocks of {block})" if block else "")
        + ", "
        f"bulk {cfg['enqueue_bulk_n']:,}, "
        f"drains {cfg['drain_n']:,} no-op jobs"
        + (
            f" (fewer for systems that cannot drain that many in {cfg['drain_budget_s']:g} s, sized "
            f"by a pilot drain: {', '.join(capped)})"
            if capped
            else ""
        )
        + f", pickup up to {cfg['pickup_samples']} samples per repetition, "
        f"{cfg['finished_rows']:,} finished rows  "
    )
    L.append(
        f"- **Run time:** {res.get('run_s', 0):.0f} s of measurements "
        f"(+{res.get('environment_setup_s', 0):.0f} s environment check/build)\n"
    )

    # --- main table
    L.append("## Results\n")
    L.append(
        "Throughput in jobs/s (higher is better); pickup latency in ms (lower is better); RSS "
        "is the largest worker process's peak.\n"
    )
    head = (
        ["system"]
        + [t for _, t in THROUGHPUT]
        + ["pickup p50", "pickup p95", "pickup p99", "worker RSS MB"]
    )
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "---|" * len(head))
    for k in systems:
        sysres = res["systems"][k]
        if sysres.get("skipped"):
            L.append(f"| {label[k]} | skipped: {sysres['skipped']} |" + " |" * (len(head) - 2))
            continue
        row = [f"**{label[k]}**" if k == PGJOBS else label[k]]
        for name, _ in THROUGHPUT:
            m = metric(res, k, name)
            if name == "enqueue_single" and k == RAW:
                plain = metric(res, k, "enqueue_single_plain")
                row.append(cell(m) + (f"<br>plain INSERT: {cell(plain)}" if plain else ""))
            elif name == "enqueue_single" and k == PGJOBS:
                own = metric(res, k, "enqueue_single_sql")
                row.append(cell(m) + (f"<br>its INSERT, raw psycopg: {cell(own)}" if own else ""))
            else:
                row.append(cell(m))
        for key in ("p50", "p95", "p99"):
            row.append(cell(metric(res, k, "pickup", key), fmt_ms))
        rss = [
            x
            for name in ("drain_w1", "drain_w2", "drain_w1_finished")
            for x in (res["systems"][k]["metrics"].get(name, {}) or {}).get("samples", [])
        ]
        row.append(f"{max(x['rss_mb'] for x in rss):.0f}" if rss else "—")
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # --- statistics robustness
    rows = [
        k
        for k in systems
        if metric(res, k, "drain_w1_nostats") or metric(res, k, "drain_w1_burststats")
    ]
    if rows:
        L.append("### Planner statistics\n")
        L.append(
            "The drains above plan with the statistics of a table of finished jobs (ANALYZE "
            "after a first drain; the steady state autovacuum leaves — this server runs with "
            "autovacuum off, so the bench VACUUMs and ANALYZEs itself). The same 1-worker drain "
            "in two other states (1 repetition): a fresh table that was never analyzed, and "
            "statistics gathered while the table held only the pending burst (what autovacuum "
            "may catch right after a big enqueue).\n"
        )
        L.append("| system | drain, 1 worker | no statistics | ratio | burst statistics | ratio |")
        L.append("|---|---|---|---|---|---|")
        for k in rows:
            b = metric(res, k, "drain_w1")
            a1, a2 = metric(res, k, "drain_w1_nostats"), metric(res, k, "drain_w1_burststats")
            L.append(
                f"| {label[k]} | {cell(b)} | {cell(a1)} | {ratio(a1, b)} | {cell(a2)} | {ratio(a2, b)} |"
            )
        L.append("")

    # --- ratios
    for ref, ref_label in ((PGJOBS, "django-pgjobs"), (RAW, "the raw psycopg limit")):
        if ref not in res["systems"] or res["systems"][ref].get("skipped"):
            continue
        L.append(f"### Ratios vs {ref_label} (system ÷ {ref_label}, medians)\n")
        L.append(
            "For throughput above 1× is faster than the reference; for latency above 1× is slower.\n"
        )
        head = ["system"] + [t for _, t in THROUGHPUT] + ["pickup p50", "pickup p99"]
        L.append("| " + " | ".join(head) + " |")
        L.append("|" + "---|" * len(head))
        for k in systems:
            if res["systems"][k].get("skipped"):
                continue
            row = [label[k]]
            for name, _ in THROUGHPUT:
                ref_name = name
                if ref == RAW and name == "enqueue_single":
                    ref_name = "enqueue_single_plain"
                row.append(ratio(metric(res, k, name), metric(res, ref, ref_name)))
            for key in ("p50", "p99"):
                row.append(ratio(metric(res, k, "pickup", key), metric(res, ref, "pickup", key)))
            L.append("| " + " | ".join(row) + " |")
        if ref == RAW:
            L.append("\n(enqueue single is compared with the raw plain single INSERT.)")
        L.append("")

    # --- targets
    L.append("## Targets (django-pgjobs)\n")
    L.append("Informational: the benchmark exits 0 whatever they say.\n")
    L.append("| target | measured | threshold | result |")
    L.append("|---|---|---|---|")
    for name, measured, threshold, ok in targets(res):
        if ok is None:
            verdict = "info" if threshold == "—" else "n/a"
        else:
            verdict = "**PASS**" if ok else "**FAIL**"
        L.append(f"| {name} | {measured} | {threshold} | {verdict} |")
    L.append("")

    # --- per-system notes
    L.append("## How each system was run\n")
    for k in systems:
        s = res["systems"][k]
        vers = ", ".join(f"{a} {b}" for a, b in s.get("versions", {}).items() if b)
        line = f"- **{label[k]}**"
        if vers:
            line += f" ({vers})"
        if s.get("skipped"):
            line += f": skipped — {s['skipped']}"
        else:
            line += f": {s.get('settings', '')}"
        L.append(line)
        samples = [x for m in s.get("metrics", {}).values() for x in m.get("samples", [])]
        repeated = sum(len(x.get("discarded", [])) for x in samples)
        loaded = [x for x in samples if x.get("foreign_cpu_cores", 0) > 0.2]
        if repeated:
            L.append(
                f"  - {repeated} sample(s) taken while other work used the CPUs were thrown away "
                "and measured again"
            )
        if loaded:
            L.append(
                f"  - warning: {len(loaded)} sample(s) kept despite other work using up to "
                f"{max(x['foreign_cpu_cores'] for x in loaded):.2f} cores meanwhile: noisier"
            )
        for e in s.get("errors", []):
            L.append(f"  - error: `{e.splitlines()[0][:300]}`")
        extra = []
        for name in ("drain_w1", "drain_w2"):
            ms = s.get("metrics", {}).get(name)
            if ms:
                st = med(ms["samples"], "startup_s")
                if st:
                    extra.append(f"{name} worker start-up {st[0]:.2f} s (not counted)")
        if extra:
            L.append("  - " + "; ".join(extra))
    L.append("")
    profs = res["systems"].get(PGJOBS, {}).get("profiles") or []
    if profs:
        L.append("## Where a django-pgjobs worker spends its time (py-spy)\n")
        L.append(
            "`py-spy record --threads --idle --nonblocking` on one `runjobs --burst` worker; "
            "share of each thread's samples, waiting included. Profiling slows the worker.\n"
        )
        for prof in profs:
            summ = prof["summary"]
            L.append(
                f"{prof['drain']['n']:,} jobs at {fmt_rate(prof['drain']['rate'])} jobs/s under the "
                "profiler (steady-state statistics):\n"
            )
            for name, g in summ["groups"].items():
                if g["share"] < 0.03:
                    continue  # start-up samples of threads not yet named
                L.append(f"- {name} ({g['share']:.0%} of samples)")
                shown = [
                    (fn, sh)
                    for fn, sh in g["inclusive"]
                    if ("django_pgjobs" in fn or "psycopg" in fn or "logging" in fn) and sh >= 0.02
                ][:10]
                for fn, sh in shown:
                    L.append(f"  - {sh:.0%} in `{fn}`")
            L.append("")
    L.append("## Method\n")
    L.append(
        "- Every system has its own database (`bench_<system>`) and environment "
        "(`bench/.venvs/<system>`); peers are never dependencies of django-pgjobs.\n"
        "- Handlers are no-ops that first write their start time (CLOCK_MONOTONIC) into a "
        "shared-memory probe (`bench/drivers/probe.py`); the orchestrator reads it without "
        "touching the database.\n"
        "- **Drain**: N pending jobs are inserted through the system's bulk API (untimed) after "
        "a CHECKPOINT, and the tables VACUUMed (planner statistics: see above), "
        "then 1 or 2 worker processes start. Time runs from the first handler start to the "
        "first moment the database shows no pending or running job (polled every 1 ms once "
        "every handler has run), so worker start-up is excluded and batched/buffered "
        "completions are included.\n"
        "- **Enqueue single**: N calls of the system's public enqueue API from one process, one "
        "job per transaction (autocommit), after 20 warm-up calls. Every system's single-enqueue "
        "series take turns: "
        + (
            f"in each turn every series has a long-lived producer, and the producers enqueue "
            f"{block} jobs at a time, one producer at a time, in an order that rotates every block "
            "(a commit's WAL flush drifts from second to second: so every series sees the same "
            "stretches of it); a turn's blocks add up to one sample per series. "
            if block
            else "one producer process of N jobs per series and turn, one series after "
            "another, in an order that rotates every turn. "
        )
        + "**Bulk**: one call with N jobs (raw: COPY).\n"
        "- **Pickup**: one idle worker in its normal (listening/polling) mode; the producer "
        "enqueues one job, reads the clock right after the commit returns, and waits for the "
        "handler's probe entry for that job; 20–50 ms random gap between jobs (django-tasks-db, "
        "which polls every second: 20–1,020 ms, so that arrivals are uniform over its poll "
        "interval).\n"
        "- **Finished rows**: rows in each system's terminal state are inserted with SQL "
        "(PgQueuer keeps finished jobs only in `pgqueuer_log`, so those are log rows), then "
        "VACUUM ANALYZE, then the same 1-worker drain, its rows kept from one drain to the "
        "next. django-pgjobs' target compares with the same drains on a twin database without "
        "the finished rows (same history: one untimed drain first), taking turns with them.\n"
        "- **RSS**: peak (VmHWM / wait4 ru_maxrss) of the largest worker process during the drains.\n"
        "- **Other work on the machine**: while each sample runs, the CPU time of every process "
        "that is not the bench's (nor a PostgreSQL backend of a `bench_*` database) is added up; "
        "a sample during which it exceeded 0.2 cores is measured again (up to twice), after "
        "waiting for a quiet machine.\n"
    )
    return "\n".join(L)


def render_png(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k, v in res["systems"].items() if not v.get("skipped")]
    labels = [res["systems"][k]["label"] for k in keys]
    colors = [
        "#d62728" if k == PGJOBS else ("#7f7f7f" if k.startswith("raw") else "#1f77b4")
        for k in keys
    ]
    panels = THROUGHPUT + [("pickup", "pickup latency p50 / p99 (ms)")]
    fig, axes = plt.subplots(2, 3, figsize=(18, 9.5), layout="constrained")
    for ax, (name, title) in zip(axes.flat, panels, strict=False):
        ys = list(range(len(keys)))
        if name == "pickup":
            base = 0.1
            top = base
            for off, key, alpha in ((-0.2, "p50", 1.0), (0.2, "p99", 0.45)):
                vals = [metric(res, k, "pickup", key) for k in keys]
                mids = [v[0] if v else 0 for v in vals]
                ax.barh(
                    [y + off for y in ys],
                    [max(m - base, 0) for m in mids],
                    left=base,
                    height=0.38,
                    color=colors,
                    alpha=alpha,
                    label=key,
                )
                for y, m in zip(ys, mids, strict=True):
                    if m:
                        ax.text(m, y + off, " " + fmt_ms(m), va="center", fontsize=7)
                top = max([top] + mids)
            ax.legend(loc="lower right", fontsize=8)
        else:
            base = 10.0
            vals = [metric(res, k, name) for k in keys]
            mids = [v[0] if v else 0 for v in vals]
            err = [
                [(v[0] - v[1]) if v else 0 for v in vals],
                [(v[2] - v[0]) if v else 0 for v in vals],
            ]
            ax.barh(
                ys,
                [max(m - base, 0) for m in mids],
                left=base,
                color=colors,
                xerr=err,
                capsize=3,
                error_kw={"ecolor": "#333", "lw": 0.8},
            )
            for y, v in zip(ys, vals, strict=True):
                if v:
                    ax.text(
                        v[2] if v[2] > v[0] else v[0],
                        y,
                        " " + fmt_rate(v[0]),
                        va="center",
                        fontsize=8,
                    )
                else:
                    ax.text(base, y, " n/a", va="center", fontsize=8, color="#888")
            top = max([base * 10] + [v[2] for v in vals if v])
        ax.set_xscale("log")
        ax.set_xlim(base, top * 6)
        ax.set_yticks(list(range(len(keys))))
        ax.set_yticklabels(labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title + ("" if name == "pickup" else " — jobs/s"), fontsize=10)
        ax.grid(axis="x", which="major", alpha=0.3)
    mach = res["machine"]
    fig.suptitle(
        f"django-pgjobs vs raw SQL vs peers — {mach['cpu_model']} × {mach['cores']} cores, "
        f"PostgreSQL {mach['postgres'].get('version')}, {res['mode']} mode, "
        f"{res['config']['reps']} rep(s), {mach['date'][:10]}",
        fontsize=11,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(json_path: Path, out_dir: Path) -> None:
    res = json.loads(Path(json_path).read_text())
    (out_dir / "latest.md").write_text(render_md(res) + "\n")
    try:
        render_png(res, out_dir / "latest.png")
    except ImportError:
        print("matplotlib missing: no latest.png", file=sys.stderr)


if __name__ == "__main__":
    p = Path(
        sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "latest.json"
    )
    render(p, p.parent)
