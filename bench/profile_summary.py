"""Summarize a py-spy ``--format raw --threads --idle`` profile (collapsed stacks).

    python bench/profile_summary.py PROFILE.txt [--top 25]

Prints, per thread group (main thread, executor threads, listener), the share of samples,
the functions that were on the stack the most (inclusive) and the leaf functions (self),
with line numbers dropped so that a function's samples add up.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::\d+)?\)$")


def _group(thread: str) -> str:
    name = thread.split(":", 1)[-1].strip()
    return re.sub(r"-\d+$", "-*", name)


def _func(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m.group('func')} ({m.group('file')})"


def summarize(path: str, top: int = 25) -> dict:
    groups: dict[str, dict] = defaultdict(
        lambda: {"samples": 0, "incl": Counter(), "self": Counter()}
    )
    total = 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or " " not in line:
                continue
            stack, _, count = line.rpartition(" ")
            try:
                n = int(count)
            except ValueError:
                continue
            frames = stack.split(";")
            g = groups[_group(frames[0])]
            g["samples"] += n
            total += n
            funcs = [_func(fr) for fr in frames[1:]]
            for fn in set(funcs):
                g["incl"][fn] += n
            if funcs:
                g["self"][funcs[-1]] += n
    out = {"total_samples": total, "groups": {}}
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["samples"]):
        out["groups"][name] = {
            "samples": g["samples"],
            "share": g["samples"] / total if total else 0,
            "inclusive": [(fn, c / g["samples"]) for fn, c in g["incl"].most_common(top)],
            "self": [(fn, c / g["samples"]) for fn, c in g["self"].most_common(top)],
        }
    return out


def render(summary: dict) -> str:
    lines = [f"total samples: {summary['total_samples']}"]
    for name, g in summary["groups"].items():
        lines.append(f"\n== {name}: {g['samples']} samples ({g['share']:.0%}) ==")
        lines.append("  on the stack (inclusive):")
        lines += [f"    {share:6.1%}  {fn}" for fn, share in g["inclusive"]]
        lines.append("  leaf (self):")
        lines += [f"    {share:6.1%}  {fn}" for fn, share in g["self"]]
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    print(render(summarize(a.profile, a.top)))
