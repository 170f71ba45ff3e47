#!/usr/bin/env python3
"""Ratio table of the last criterion run: each figure per element, next to the
floor measured in the same binary, and the target.

Usage: python3 benches/ratios.py [CRITERION_DIR [BASELINE]]
(defaults: target/criterion, new; `cargo bench -- --save-baseline NAME` keeps
a run under NAME, safe from the next run of anyone sharing the target dir).
"""
import json
import os
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "target/criterion"
BASELINE = sys.argv[2] if len(sys.argv) > 2 else "new"

# (figure, floor, target ratio or None)
PAIRS = [
    ("cycle/session", "cycle/raw", 4.0),
    ("cycle/session_terminate", "cycle/raw", None),
    ("fanout/session/1000", "fanout/raw/1000", 4.0),
    ("fanout/session/10000", "fanout/raw/10000", 4.0),
    ("fanout/session/100000", "fanout/raw/100000", 4.0),
    ("list/session/10000", "list/raw/10000", None),
    ("cancel/wide/10000", "fanout/raw/10000", None),
    ("cancel/deep/10000", "fanout/raw/10000", None),
    ("wire_tcp/1_session", "wire_tcp/floor_1_session", None),
    ("wire_tcp/8_sessions", "wire_tcp/floor_1_session", None),
    ("wire_http/1_session", None, None),
]


def per_element(name):
    """Mean ns per element and elements per iteration, or None if not run."""
    base = os.path.join(ROOT, name)
    try:
        with open(os.path.join(base, BASELINE, "estimates.json")) as f:
            mean = json.load(f)["mean"]["point_estimate"]
        with open(os.path.join(base, BASELINE, "benchmark.json")) as f:
            throughput = json.load(f).get("throughput") or {}
    except FileNotFoundError:
        return None
    elements = throughput.get("Elements", 1)
    return mean / elements, elements


def fmt_ns(ns):
    return f"{ns / 1000:.2f} µs" if ns >= 1000 else f"{ns:.0f} ns"


print(f"{'figure':<26} {'per element':>12} {'per second':>12} {'floor':>10} {'ratio':>7}  target")
for figure, floor, target in PAIRS:
    got = per_element(figure)
    if got is None:
        continue
    ns, _ = got
    line = f"{figure:<26} {fmt_ns(ns):>12} {1e9 / ns:>12,.0f}"
    if floor and per_element(floor):
        floor_ns, _ = per_element(floor)
        ratio = ns / floor_ns
        verdict = "" if target is None else (f"≤{target:g}× met" if ratio <= target else f"≤{target:g}× MISSED")
        line += f" {fmt_ns(floor_ns):>10} {ratio:>6.2f}×  {verdict}"
    print(line)
