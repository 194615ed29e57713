"""Operators per training step, megabatch against a Python baseline, from two Chrome traces
(Note [Operator profile] in src/train/watch/StepProfiler.h):

  megabatch:  MEGABATCH_PROFILE=mb.json MEGABATCH_PROFILE_STEPS=21:40 megabatch train ...
  baselines:  MEGABATCH_PROFILE=py.json (bench/models/cpu_throughput.py --measure eager-1.13 ...,
              bench/graphs/gnn_bench.py, bench/models/panel_gat_bench.py: 20 profiled steps
              after the timed ones, with torch.autograd.profiler)

    /usr/bin/python3 bench/profile_ops.py mb.json py.json [--steps 20] [--top 40]

For every operator name: calls per step and self time per step (its time minus that of the
operators it called) on each side, sorted by the larger self time, then the totals. Self times
include the profiler's own cost (a few microseconds per operator on both sides), so compare
counts first and times second.
"""
import argparse
import collections
import json


def load_events(path):
    with open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    ops = []
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category = e.get("cat", "cpu_op")
        # torch.profiler traces hold Python frames and annotations too; keep the operators.
        if category not in ("cpu_op", "Operator", "operator"):
            continue
        ops.append((e.get("pid"), e.get("tid"), float(e["ts"]), float(e["dur"]), e["name"]))
    return ops


def exclusive(ops):
    """{name: [calls, self_us]}: self time excludes the operators nested inside (same thread)."""
    table = collections.defaultdict(lambda: [0, 0.0])
    by_thread = collections.defaultdict(list)
    for pid, tid, ts, dur, name in ops:
        by_thread[(pid, tid)].append((ts, dur, name))
    for events in by_thread.values():
        events.sort(key=lambda e: (e[0], -e[1]))
        stack = []  # entries: [end, name, dur, children]

        def close(entry):
            table[entry[1]][0] += 1
            table[entry[1]][1] += entry[2] - entry[3]

        for ts, dur, name in events:
            while stack and stack[-1][0] <= ts:
                close(stack.pop())
            if stack:
                stack[-1][3] += dur
            stack.append([ts + dur, name, dur, 0.0])
        while stack:
            close(stack.pop())
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("megabatch")
    parser.add_argument("baseline", nargs="?")
    parser.add_argument("--steps", type=int, default=20, help="steps each trace holds")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    sides = {"megabatch": exclusive(load_events(args.megabatch))}
    if args.baseline:
        sides["baseline"] = exclusive(load_events(args.baseline))
    names = set()
    for table in sides.values():
        names.update(table)
    per_step = {side: {n: (t[n][0] / args.steps, t[n][1] / args.steps) for n in t} for side, t in sides.items()}
    rows = sorted(names, key=lambda n: -max(per_step[s].get(n, (0, 0))[1] for s in per_step))
    header = "| operator | " + " | ".join("%s calls/step | %s self us/step" % (s, s) for s in per_step) + " |"
    print(header)
    print("|---|" + "---|---|" * len(per_step))
    for name in rows[:args.top]:
        cells = []
        for side in per_step:
            calls, us = per_step[side].get(name, (0, 0))
            cells.append("%.1f | %.0f" % (calls, us))
        print("| %s | %s |" % (name, " | ".join(cells)))
    totals = []
    for side, table in per_step.items():
        totals.append("%s: %.0f operators, %.0f us self time per step" % (
            side, sum(c for c, _ in table.values()), sum(u for _, u in table.values())))
    print("\n" + "; ".join(totals))
    if args.baseline:
        print(shared_summary(per_step["megabatch"], per_step["baseline"]))


def shared_summary(mine, theirs):
    """How much of each side's step is the same work: the operators both sides call equally
    often (within 10% or half a call per step), as a share of each side's self time. Where that
    share is high, the two sides run the same kernels and megabatch can only win on the rest."""
    def same(name):
        a, b = mine.get(name, (0, 0))[0], theirs.get(name, (0, 0))[0]
        return a > 0 and b > 0 and abs(a - b) <= max(0.5, 0.1 * max(a, b))
    shared = [n for n in set(mine) | set(theirs) if same(n)]
    share = []
    for table in (mine, theirs):
        total = sum(u for _, u in table.values())
        share.append(100.0 * sum(table[n][1] for n in shared) / total if total else 0.0)
    return ("operators called equally often on both sides (%d names): %.0f%% of megabatch's self time, "
            "%.0f%% of the baseline's" % (len(shared), share[0], share[1]))


if __name__ == "__main__":
    main()
