#!/usr/bin/env python3
"""Soak: 8 hostile plugins and one good one in one host under a syscall storm.

    sudo bench/soak.py [--seconds 600]

Runs the test fixture countcheck (the good plugin: counts every syscall both in the
kernel and from the streamed events, so a lost event shows as a difference) beside
spin, membomb, trap, trapper, flood, bigstr, sleeper and slowpoke, all with
`--on-fault restart` and a crash-loop limit high enough that the faulting ones keep
coming back (backoff capped at 5 s) for the whole run, while `getppid_paced` calls
getppid 400,000 times a second (rounds of 5000 calls, 10 ms apart). Samples the host's resident memory every second and prints:
events, the good plugin's kernel and streamed getppid counts, the kernel's ring-full
drops, each plugin's faults, restarts and disabling, and RSS (first minute, peak,
last minute, growth per minute after the first minute). Needs root and a build
(`./x build`).
"""
import argparse, json, os, platform, signal, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WASMTAP = os.path.join(ROOT, "target/release/wasmtap")
WASM = os.path.join(ROOT, "target/wasm32-wasip2/wasm")
HOSTILE = ["spin", "membomb", "trap", "trapper", "flood", "bigstr", "sleeper", "slowpoke"]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=600)
    args = ap.parse_args()
    storm = os.path.join(ROOT, "target/workloads/getppid_paced")
    os.makedirs(os.path.dirname(storm), exist_ok=True)
    subprocess.run(["cc", "-O2", "-o", storm, os.path.join(ROOT, "tests/workloads/getppid_paced.c")], check=True)
    # Rounds of 5000 getppid calls with 10 ms pauses: about 80 rounds, 400,000 calls a
    # second, sustained; the exact total is known.
    rounds = args.seconds * 80
    calls = rounds * 5000
    cmd = [WASMTAP, "run", os.path.join(WASM, "countcheck.wasm"), "--param", "countcheck.top=3"]
    cmd += [os.path.join(WASM, f"{h}.wasm") for h in HOSTILE]
    cmd += ["-c", f"taskset -c 1 {storm} {rounds} 5000 10", "-o", "json", "--stats"]
    cmd += ["--on-fault", "restart", "--crash-loop", "1000", "--output-budget", "flood=256"]
    started = time.time()
    out_f, err_f = open("/tmp/wasmtap-soak.out", "w+b"), open("/tmp/wasmtap-soak.err", "w+b")
    p = subprocess.Popen(cmd, stdout=out_f, stderr=err_f)
    samples = []
    while p.poll() is None:
        kib = rss_kib(p.pid)
        if kib is not None:
            samples.append((time.time() - started, kib))
        time.sleep(1)
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    lines = [json.loads(l) for l in out.decode().splitlines() if l.startswith("{")]
    acct = next((l["data"] for l in lines if l["type"] == "accounting"), None)
    if acct is None:
        sys.exit(f"wasmtap exited with {p.returncode} without an accounting:\n{err.decode()[-3000:]}")
    maps = {}
    for l in lines:
        if l["type"] == "map":
            maps.update(l["data"])
    kernel_count = maps.get("@syscall", {}).get("getppid")
    streamed_count = maps.get("@syscall_streamed", {}).get("getppid")
    first = [k for t, k in samples if t <= 60]
    last = [k for t, k in samples if t >= samples[-1][0] - 60]
    after = [(t, k) for t, k in samples if t > 60]
    slope = 0.0
    if len(after) > 2:
        n = len(after)
        mt = sum(t for t, _ in after) / n
        mk = sum(k for _, k in after) / n
        slope = sum((t - mt) * (k - mk) for t, k in after) / max(sum((t - mt) ** 2 for t, _ in after), 1e-9)
    result = {
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Linux {platform.release()}",
        "seconds": round(time.time() - started),
        "exit_code": p.returncode,
        "events_from_kernel": sum(k["emitted"] for k in acct["kernel"]["kinds"].values()),
        "ring_full_drops": sum(k["dropped"] for k in acct["kernel"]["kinds"].values()),
        "getppid_calls": calls,
        "getppid_per_second": round(calls / max(time.time() - started, 1)),
        "getppid_kernel": kernel_count,
        "getppid_streamed": streamed_count,
        "plugins": {
            pl["name"]: {
                k: pl[k] for k in ["delivered", "dropped", "dropped_budget", "dropped_fault", "faults", "restarts", "disabled", "cpu_ms"]
            }
            for pl in acct["plugins"]
        },
        "rss_mib": {
            "first_minute_max": round(max(first) / 1024, 1) if first else None,
            "peak": round(max(k for _, k in samples) / 1024, 1),
            "last_minute_max": round(max(last) / 1024, 1),
            "growth_per_minute_after_first": round(slope * 60 / 1024, 2),
        },
        "host_peak_rss_mib": round(acct["host"]["peak_rss_bytes"] / 2**20, 1),
    }
    print(json.dumps(result, indent=2))
    ok = result["ring_full_drops"] == 0 and kernel_count == calls and streamed_count == calls
    print("good plugin lost no events" if ok else "GOOD PLUGIN LOST EVENTS", file=sys.stderr)
    if not ok:
        sys.stderr.write(err.decode()[-4000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
