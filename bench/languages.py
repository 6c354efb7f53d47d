#!/usr/bin/env python3
"""Plugins in Rust, C, Python and JavaScript: what one event costs each, and their memory.

    sudo bench/languages.py [--rounds 3] [--opens 50000] [--live-opens 20000]

Needs `./x build` first (it builds the examples) and root (to record). The same plugin in
each language, opensnoop (one row per open: flags decoded, errno named, the path made
absolute), streams every open of a workload:

- per event: a recording of `opener` making --opens opens is replayed by each plugin
  alone, every row written; the plugin's CPU time (the host's meter: time inside the
  sandbox) over the events delivered, the median of --rounds replays. Nothing is lost
  in a replay: the script checks one row per event.
- memory: the plugin's peak linear memory (the host's accounting) and the whole
  process's peak RSS in the same replays; the first replay compiles (cache off), and its
  wall time is the compile's cost.
- live: the four together beside each other on `opener` making --live-opens opens as fast
  as it can; what each delivered and dropped (a plugin past its CPU budget, 50% of a CPU
  by default, loses events, counted, while the others lose none).
- the rate each can take within the default budget: 0.5 s of CPU a second over its cost.

It prints Markdown for docs/benchmarks.md and docs/languages.md.
"""
import argparse, json, os, platform, statistics, subprocess, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASMTAP = os.environ.get("WASMTAP") or os.path.join(ROOT, "target/release/wasmtap")
WASM = os.path.join(ROOT, "target/wasm32-wasip2/wasm")
OPENER = os.path.join(ROOT, "target/workloads/opener")
os.environ.setdefault("WASMTAP_PLUGIN_PATH", os.path.join(ROOT, "target/release/plugins"))
PLUGINS = [("Rust", "opensnoop"), ("C", "c-opensnoop"), ("Python", "python-opensnoop"), ("JavaScript", "js-opensnoop")]


def arg(name):
    return name if name == "opensnoop" else os.path.join(WASM, name + ".wasm")


def accounting(out):
    rows, acct = 0, None
    for line in out.splitlines():
        v = json.loads(line)
        if v["type"] == "row":
            rows += 1
        elif v["type"] == "accounting":
            acct = v["data"]
    return rows, acct


def replay(recording, name, cache):
    env = dict(os.environ, WASMTAP_CACHE_DIR=cache)
    t0 = time.perf_counter()
    p = subprocess.run([WASMTAP, "replay", recording, arg(name), "-o", "json"], env=env, capture_output=True,
                       text=True, check=True)
    wall = time.perf_counter() - t0
    rows, acct = accounting(p.stdout)
    plugin = acct["plugins"][0]
    return wall, rows, plugin, acct["host"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--opens", type=int, default=50_000)
    ap.add_argument("--live-opens", type=int, default=20_000)
    a = ap.parse_args()
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs ({cpu}), Linux {platform.release()}; "
          f"{a.rounds} rounds, medians (min-max)\n")
    tmp = tempfile.mkdtemp(prefix="wt-lang-")
    recording = os.path.join(tmp, "opens.wtrec")
    subprocess.run([WASMTAP, "record", "opensnoop", "-o", recording, "-c", f"{OPENER} {a.opens} 0 0 0"],
                   capture_output=True, check=True)
    fmt = lambda xs, unit, d=1: f"{statistics.median(xs):.{d}f} {unit} ({min(xs):.{d}f}-{max(xs):.{d}f})"
    print(f"Replay of `opener {a.opens}` ({a.opens + 9} opens), every row written:\n")
    print("| plugin | .wasm | compile (cache off) | per event (plugin CPU) | rate within 50% of a CPU | "
          "plugin memory peak | process peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for lang, name in PLUGINS:
        size = os.path.getsize(arg(name)) if name != "opensnoop" else os.path.getsize(
            os.path.join(ROOT, "target/release/plugins/opensnoop.wasm"))
        cold, _, _, _ = replay(recording, name, "off")
        cache = os.path.join(tmp, "cache-" + name)
        replay(recording, name, cache)  # fills the cache
        per_event, mem, rss = [], [], []
        for _ in range(a.rounds):
            _, rows, plugin, host = replay(recording, name, cache)
            if rows != plugin["delivered"] or plugin["dropped"]:
                raise SystemExit(f"{name}: {rows} rows for {plugin['delivered']} events, {plugin['dropped']} dropped")
            per_event.append(plugin["cpu_ms"] * 1e6 / plugin["delivered"])
            mem.append(host["plugin_memory_peak_bytes"] / 2**20)
            rss.append(host["peak_rss_bytes"] / 2**20)
        rate = 0.5e9 / statistics.median(per_event)
        print(f"| {lang} ({name}) | {size / 1e6:.2f} MB | {cold:.2f} s | {fmt(per_event, 'ns')} | "
              f"{rate:,.0f} events/s | {fmt(mem, 'MiB')} | {fmt(rss, 'MiB')} |")

    print(f"\nLive, the four at once on `opener {a.live_opens}` (as fast as it opens):\n")
    p = subprocess.run([WASMTAP, "run"] + [arg(n) for _, n in PLUGINS] +
                       ["-c", f"{OPENER} {a.live_opens} 0 0 0", "-o", "json"], capture_output=True, text=True)
    _, acct = accounting(p.stdout)
    print("| plugin | delivered | dropped (budget) | plugin CPU |")
    print("|---|---|---|---|")
    for plugin in acct["plugins"]:
        print(f"| {plugin['name']} | {plugin['delivered']:,} | {plugin['dropped']:,} ({plugin['dropped_budget']:,}) | "
              f"{plugin['cpu_ms']} ms |")
    k = acct["kernel"]
    print(f"\nkernel: {json.dumps({x: k[x] for x in k if isinstance(k[x], int)})}")


if __name__ == "__main__":
    main()
