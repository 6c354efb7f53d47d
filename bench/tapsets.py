#!/usr/bin/env python3
"""Tapsets: what linking the syscalls tapset costs a plugin, against the tables compiled in.

    bench/tapsets.py [--rounds 5] [--calls 200000]

Needs `./x build` first; no root (everything runs through `wasmtap replay`). Two fixtures
run the same loop at `begin`, decoding errno names: tapcall, through the tapset the host
links in, and tapcall-static, with the tables compiled into the plugin as every plugin had
them before. It prints Markdown:

- load: a replay of a tiny recording with calls=0, wall time, with a fresh compiled-code
  cache (cold: compose and compile) and with a warm one (cached);
- per call: the plugin's CPU time (the host's meter) for --calls names, less a run with
  none, divided by the calls; `remembered` is `wasmtap_sdk::syscalls::errno_name` as
  plugins call it, `each` a call of the tapset per name (a string copied back each time),
  `batch` 1,000 names a call;
- linking: `cargo bench -p wasmtap --bench tapset_link` (host/benches/tapset_link.rs),
  composition against instance-to-instance linking through host forwarders.
"""
import argparse, json, os, platform, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASMTAP = os.environ.get("WASMTAP") or os.path.join(ROOT, "target/release/wasmtap")
WASM = os.path.join(ROOT, "target/wasm32-wasip2/wasm")
RECORDING = os.path.join(ROOT, "tests/golden/files.wtrec")
os.environ.setdefault("WASMTAP_PLUGIN_PATH", os.path.join(ROOT, "target/release/plugins"))
FIXTURES = [("linked", "tapcall"), ("static", "tapcall_static")]


def replay(fixture, cache, calls=0, how="remembered"):
    """(wall seconds, plugin CPU ms, decoded) of one replay."""
    env = dict(os.environ, WASMTAP_CACHE_DIR=cache)
    cmd = [WASMTAP, "replay", RECORDING, os.path.join(WASM, fixture + ".wasm"),
           "--param", f"calls={calls}", "--param", f"how={how}", "-o", "json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    cpu, decoded = None, None
    for line in out.splitlines():
        v = json.loads(line)
        if v["type"] == "accounting":
            cpu = v["data"]["plugins"][0]["cpu_ms"]
        elif v["type"] == "map":
            decoded = v["data"]["@decoded"]["decoded"]
    return wall, cpu, decoded


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=200_000)
    a = ap.parse_args()
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}; "
          f"{a.rounds} rounds, medians (min-max)\n")
    fmt = lambda xs, unit: f"{statistics.median(xs):.1f} {unit} ({min(xs):.1f}-{max(xs):.1f})"

    print("| load (replay, calls=0) | cold cache | cached |")
    print("|---|---|---|")
    for label, fixture in FIXTURES:
        cold, warm = [], []
        for _ in range(a.rounds):
            with tempfile.TemporaryDirectory(prefix="wasmtap-tapsets-") as cache:
                cold.append(replay(fixture, cache)[0] * 1000)
                warm.append(replay(fixture, cache)[0] * 1000)
        size = os.path.getsize(os.path.join(WASM, fixture + ".wasm"))
        print(f"| {label} ({fixture}, {size // 1024} KiB) | {fmt(cold, 'ms')} | {fmt(warm, 'ms')} |")

    print(f"\n| per name decoded ({a.calls} names) | remembered | each | batch |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="wasmtap-tapsets-") as cache:
        for label, fixture in FIXTURES:
            cells = []
            for how in ["remembered", "each", "batch"]:
                ns = []
                for _ in range(a.rounds):
                    _, base, _ = replay(fixture, cache, 0, how)
                    _, cpu, decoded = replay(fixture, cache, a.calls, how)
                    assert decoded and decoded > a.calls * 9 // 10, f"{fixture} {how}: {decoded} names of {a.calls}"
                    ns.append((cpu - base) * 1e6 / a.calls)
                cells.append(fmt(ns, "ns"))
            print(f"| {label} | " + " | ".join(cells) + " |")

    print()
    sys.stdout.flush()
    subprocess.run(["cargo", "bench", "-q", "-p", "wasmtap", "--bench", "tapset_link"], cwd=ROOT, check=True)


if __name__ == "__main__":
    main()
