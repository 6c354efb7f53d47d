#!/usr/bin/env python3
"""wasmtap against bpftrace: overhead, streaming, start-up and memory, in one command.

    sudo bench/run.py [--rounds 5] [--quick] [--only overhead,streaming,startup,micro,daemon,oneliners,fleet] [--workloads W1,W5]

Needs `./x build` first and bpftrace (Debian's, `apt-get install bpftrace`). Every measure
runs the same workload with no tracer, under bpftrace and under wasmtap, alternating
within each round; tracers run on CPU 0, workloads on CPU 1. It prints Markdown: the
machine, then one table per section with medians, ranges (min-max), ratios to bpftrace,
and the count each tracer reported against the workload's known count.

`daemon` measures the shared host: a `wasmtap daemon` with a policy naming a user it
creates (`wtbench`, removed at the end), that user's `wasmtap run` through it, beside
root's direct run and bpftrace, on W1 and on paced streaming.

Workloads (bench/workloads/*.c, and W5 from tests/workloads/pingpong.c; each prints its
own ns per operation):
  W1 getppid storm (3M)            W2 openat+close storm (500k)
  W3 fork+exec of /bin/true (2k)   W4 page-fault storm (2 GiB of fresh pages)
  W5 pipe ping-pong (200k round trips)
"""
import argparse, os, platform, re, shutil, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# WASMTAP=path runs another build (a before-and-after comparison) with this tree's workloads.
WASMTAP = os.environ.get("WASMTAP") or os.path.join(ROOT, "target/release/wasmtap")
BIN = os.path.join(ROOT, "target/bench")
# Plugins by name: the package index `./x build` installs, then the example plugins (snoop).
os.environ.setdefault("WASMTAP_PLUGIN_PATH", os.pathsep.join(
    [os.path.join(ROOT, "target/release/plugins"), os.path.join(ROOT, "target/wasm32-wasip2/wasm")]))
TMP = tempfile.mkdtemp(prefix="wasmtap-bench-")
GETPPID = 110  # x86_64

# name, binary, full-size argument, syscalls per operation under the workload's comm
WORKLOADS = [
    ("W1", "w1_getppid", 3_000_000, 1),
    ("W2", "w2_openat", 500_000, 2),
    ("W3", "w3_forkexec", 2_000, 4),  # parent: clone + wait4; child: set_robust_list + execve (before its comm changes)
    ("W4", "w4_pagefault", 2048, 0),  # argument in MiB; ops are pages; syscalls: mmap/munmap per 64 MiB
    ("W5", "w5_pipe", 200_000, 4),  # each round trip: write+read in the parent, read+write in the child
]

BT_COUNT = "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }"
# The floor: what any program on the hook costs, an empty one (and the same for the
# enter+exit pair a latency measure needs).
BT_FLOOR_ENTER = "tracepoint:raw_syscalls:sys_enter { }"
# syscount's question as bpftrace users ask it: which syscalls, and which processes.
BT_SYSCOUNT = "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); @s[args->id] = count(); }"
BT_FLOOR_PAIR = "tracepoint:raw_syscalls:sys_enter { } tracepoint:raw_syscalls:sys_exit { }"
BT_LATENCY = (
    "tracepoint:raw_syscalls:sys_enter { @s[tid] = nsecs; } "
    "tracepoint:raw_syscalls:sys_exit /@s[tid]/ { @ns[args->id] = hist(nsecs - @s[tid]); delete(@s[tid]); }"
)
BT_OPENSNOOP = (
    "tracepoint:syscalls:sys_enter_openat { @fn[tid] = args->filename; } "
    "tracepoint:syscalls:sys_exit_openat /@fn[tid]/ "
    '{ printf("%d %s %d %s\\n", pid, comm, args->ret, str(@fn[tid])); delete(@fn[tid]); }'
)
BT_EXECSNOOP = 'tracepoint:syscalls:sys_enter_execve { printf("%d %d ", pid, curtask->real_parent->tgid); join(args->argv); }'
BT_RUNQLAT = (
    "tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new { @qtime[args->pid] = nsecs; } "
    "tracepoint:sched:sched_switch { if (args->prev_state == 0) { @qtime[args->prev_pid] = nsecs; } "
    "$ns = @qtime[args->next_pid]; if ($ns) { @nsecs = hist(nsecs - $ns); } delete(@qtime[args->next_pid]); }"
)
BT_PRINTF = 'tracepoint:syscalls:sys_enter_getppid { printf("%d %d %s\\n", pid, tid, comm); }'
BT_MAP_TID = "tracepoint:syscalls:sys_enter_getppid { @[tid] = count(); }"


def wt(*args):
    return [WASMTAP, "run", *args]


def build():
    os.makedirs(BIN, exist_ok=True)
    sources = [(src[:-2], os.path.join(ROOT, "bench/workloads", src))
               for src in sorted(os.listdir(os.path.join(ROOT, "bench/workloads"))) if src.endswith(".c")]
    # W5 is the test suite's ping-pong, under a name of its own (its comm is counted).
    sources.append(("w5_pipe", os.path.join(ROOT, "tests/workloads/pingpong.c")))
    for name, src in sources:
        subprocess.run(["cc", "-O2", "-o", os.path.join(BIN, name), src], check=True)
    if not os.access(WASMTAP, os.X_OK):
        sys.exit(f"{WASMTAP} is missing: run ./x build first")


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    bt = subprocess.run(["bpftrace", "--version"], capture_output=True, text=True).stdout.strip()
    mem = int(open("/proc/meminfo").readline().split()[1]) // 1024
    virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True).stdout.strip() or "?"
    return f"{platform.node()} ({virt}), Linux {platform.release()}, {os.cpu_count()} CPUs ({cpu}), {mem} MiB RAM, {bt}"


def run_workload(binary, arg, user=None, bin_dir=BIN):
    as_user = {"user": user, "group": user, "extra_groups": []} if user else {}
    out = subprocess.run(["taskset", "-c", "1", os.path.join(bin_dir, binary), str(arg)], check=True,
                         capture_output=True, text=True, **as_user).stdout
    m = re.search(r"ops (\d+) ns_per_op ([\d.]+)", out)
    return int(m.group(1)), float(m.group(2))


class Tracer:
    """A tracer process on CPU 0, its output in files; ready once its attach message is out."""

    def __init__(self, cmd, ready, name, user=None):
        # The child writes through its own file descriptions; reading through others
        # (by path) leaves its file offset alone.
        self.name = name
        self.out_path, self.err_path = os.path.join(TMP, f"{name}.out"), os.path.join(TMP, f"{name}.err")
        self.out, self.err = open(self.out_path, "wb"), open(self.err_path, "wb")
        self.t0 = time.monotonic()
        as_user = {"user": user, "group": user, "extra_groups": []} if user else {}
        self.p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=self.out, stderr=self.err, **as_user)
        deadline = time.monotonic() + 60
        while ready not in self.text() + self.errors():
            if self.p.poll() is not None or time.monotonic() > deadline:
                self.p.kill()  # a tracer left running would skew every later measure
                raise SystemExit(f"tracer {cmd} did not start: {self.errors()}")
            time.sleep(0.005)
        time.sleep(0.5)

    def text(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def errors(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode(errors="replace")

    def peak_rss_mib(self):
        """The tracer's own high-water RSS (VmHWM). Not wait4's ru_maxrss: across
        fork and exec that starts from this (large) Python process's."""
        try:
            for line in open(f"/proc/{self.p.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def stop(self):
        """SIGINT; returns (seconds to exit, peak RSS MiB before the stop, CPU seconds)."""
        peak = self.peak_rss_mib()
        t = time.monotonic()
        self.p.send_signal(signal.SIGINT)
        # A tracer that does not exit within a minute is killed (and said so), so that one
        # hang does not stall the whole suite; its measure then counts the minute.
        while True:
            pid, status, ru = os.wait4(self.p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t > 60:
                print(f"bench: {self.name} did not exit within 60 s of SIGINT; killed", file=sys.stderr)
                self.p.kill()
                _, status, ru = os.wait4(self.p.pid, 0)
                break
            time.sleep(0.01)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        return time.monotonic() - t, peak, ru.ru_utime + ru.ru_stime


def bt(program, name):
    return Tracer(["bpftrace", "-e", program], "Attaching", name)


def wasmtap(args, name):
    return Tracer(wt(*args), "Attached", name)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def rng(xs):
    return f"{min(xs):.0f}-{max(xs):.0f}" if xs else "-"


def count_of(text, pattern):
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def hist_total(text, header):
    """Sum of the counts of the histogram printed after the line starting with `header`."""
    total, inside = 0, False
    for line in text.splitlines():
        if line.startswith(header):
            inside = True
            continue
        if inside:
            m = re.match(r"\[[^\]]*[\])]\s+(\d+)\s+\|", line.strip())
            if m:
                total += int(m.group(1))
            elif line.strip() == "" or line.startswith("@"):
                if total:
                    break
    return total


def overhead(rounds, quick, workloads):
    """Added ns per operation of each tool on each workload, with counts checked."""
    rows = []
    notes = []
    for wname, binary, full, per_op in WORKLOADS:
        if wname not in workloads:
            continue
        arg = max(1, full // 10) if quick else full
        comm = binary[:15]
        # top=0: every process, as bpftrace prints them all (the default top 10 leaves out a
        # workload with fewer syscalls than ten busier processes).
        tools = [
            ("count by comm", lambda n: bt(BT_COUNT, n), rf"@\[{comm}\]: (\d+)",
             lambda n: wasmtap(["syscount", "--param", "by=process", "--param", "top=0"], n),
             rf"@process\[{comm}\]: (\d+)"),
        ]
        if wname == "W1":
            tools.append(("syscount: by syscall and by comm", lambda n: bt(BT_SYSCOUNT, n), rf"@\[{comm}\]: (\d+)",
                          lambda n: wasmtap(["syscount", "--param", "top=0"], n), rf"@process\[{comm}\]: (\d+)"))
            tools.append(("syscall latency histogram", lambda n: bt(BT_LATENCY, n), f"@ns[{GETPPID}]:",
                          lambda n: wasmtap(["syslatency"], n), "@nanoseconds[getppid]:"))
        if wname == "W2":
            tools.append(("opensnoop, streamed", lambda n: bt(BT_OPENSNOOP, n), "/etc/hostname",
                          lambda n: wasmtap(["opensnoop", "--output-budget", "4194304"], n), "/etc/hostname"))
        if wname == "W3":
            tools.append(("execsnoop, streamed", lambda n: bt(BT_EXECSNOOP, n), "true",
                          lambda n: wasmtap(["execsnoop", "--output-budget", "4194304"], n), "true"))
        if wname == "W5":
            tools.append(("runqlat", lambda n: bt(BT_RUNQLAT, n), "@nsecs:",
                          lambda n: wasmtap(["runqlat"], n), "@nsecs:"))
        for tool, bt_start, bt_pat, wt_start, wt_pat in tools:
            counting = tool in ("count by comm", "syscount: by syscall and by comm")
            floor_prog = BT_FLOOR_PAIR if tool == "syscall latency histogram" else BT_FLOOR_ENTER if counting else None
            ns = {"none": [], "bpftrace": [], "wasmtap": [], "floor": []}
            counts = {"bpftrace": [], "wasmtap": []}
            rss = {"bpftrace": [], "wasmtap": []}
            cpu = {"bpftrace": [], "wasmtap": []}
            ops = 0
            argv_lost = {}
            for r in range(rounds):
                ops, x = run_workload(binary, arg)
                ns["none"].append(x)
                if floor_prog:
                    t = bt(floor_prog, f"{wname}-floor-{r}")
                    _, x = run_workload(binary, arg)
                    t.stop()
                    ns["floor"].append(x)
                for who, start, pat in (("bpftrace", bt_start, bt_pat), ("wasmtap", wt_start, wt_pat)):
                    t = start(f"{wname}-{who}-{r}")
                    _, x = run_workload(binary, arg)
                    _, peak, secs = t.stop()
                    ns[who].append(x)
                    rss[who].append(peak)
                    cpu[who].append(secs)
                    text = t.text()
                    if counting:
                        counts[who].append(count_of(text, pat))
                    elif tool == "syscall latency histogram" or tool == "runqlat":
                        counts[who].append(hist_total(text, pat))
                    elif tool.startswith("opensnoop"):
                        counts[who].append(sum(1 for l in text.splitlines() if comm in l and pat in l))
                    elif who == "bpftrace":
                        # "PID PPID ARGV": bpftrace reads argv at entry, where a fresh
                        # child's string literals may not be resident yet: empty argv.
                        lines = [l for l in text.splitlines() if re.match(r"^\d+ \d+ ", l)]
                        counts[who].append(sum(1 for l in lines if l.split()[2:] in ([], ["true"])))
                        argv_lost[who] = argv_lost.get(who, 0) + sum(1 for l in lines if l.split()[2:] == [])
                    else:
                        counts[who].append(sum(1 for l in text.splitlines() if re.search(r" true\s*$", l)))
            base = med(ns["none"])
            added = {w: med(ns[w]) - base for w in ("bpftrace", "wasmtap")}
            floor = med(ns["floor"]) - base if ns["floor"] else None
            ratio = added["wasmtap"] / added["bpftrace"] if added["bpftrace"] > 0 else float("nan")
            if counting:
                expect = per_op * ops
                check = {w: ", ".join(f"{c - expect:+d}" if c is not None else "missing" for c in counts[w]) for w in counts}
                known = f"{per_op}×{ops:,} syscalls (+ start-up)"
            elif tool in ("opensnoop, streamed", "execsnoop, streamed", "syscall latency histogram"):
                check = {w: ", ".join(f"{c - ops:+d}" for c in counts[w]) for w in counts}
                known = f"{ops:,}"
            else:
                check = {w: ", ".join(str(c) for c in counts[w]) for w in counts}
                known = "samples (no exact truth)"
            added_rng = {w: rng([x - base for x in ns[w]]) for w in added}
            floor_cell = "-" if floor is None else f"{floor:+.1f} ({rng([x - base for x in ns['floor']])})"
            floor_ratio = "-" if floor is None or floor <= 0 else f"{added['wasmtap'] / floor:.2f}"
            rows.append((wname, tool, base, rng(ns["none"]), added, added_rng, ratio, known, check,
                         {w: max(rss[w]) for w in rss}, {w: med(cpu[w]) for w in cpu}, floor_cell, floor_ratio))
            if argv_lost:
                notes.append(f"{wname} {tool}: bpftrace printed an empty argv for {argv_lost.get('bpftrace', 0)} of its exec lines")
            print(f"  {wname} {tool}: none {base:.1f} ns/op, bpftrace {added['bpftrace']:+.1f}, "
                  f"wasmtap {added['wasmtap']:+.1f} (ratio {ratio:.2f}); counts vs known {known}: "
                  f"bpftrace [{check['bpftrace']}], wasmtap [{check['wasmtap']}]; empty hook {floor_cell}",
                  file=sys.stderr, flush=True)
    print("\n## Overhead: added ns per operation\n")
    print("Medians of the rounds; in brackets the range (min-max) over the rounds, of the bare ns/op and of "
          "each traced round's ns/op minus the bare median. Counts: each round's count minus the known count. "
          "Peak RSS: the tracer's VmHWM just before it is stopped, the largest over the rounds. Tracer CPU: "
          "user + system seconds of the tracer process, median (BPF programs run in the workload's context "
          "and are in the added ns, not here). Empty hook: an empty bpftrace program on "
          "`raw_syscalls:sys_enter` (count rows) or on `sys_enter` and `sys_exit` (latency), the cost of "
          "any program there at all; wasmtap/hook is wasmtap's added ns over it.\n")
    print("| workload | tool | none ns/op | empty hook added | bpftrace added | wasmtap added | wasmtap/bpftrace | wasmtap/hook | known count | bpftrace count − known | wasmtap count − known | peak RSS MiB bpftrace / wasmtap | tracer CPU s bpftrace / wasmtap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, tool, base, brng, added, ranges, ratio, known, check, rss, cpu, floor_cell, floor_ratio in rows:
        print(f"| {w} | {tool} | {base:.1f} ({brng}) | {floor_cell} | {added['bpftrace']:+.1f} ({ranges['bpftrace']}) | "
              f"{added['wasmtap']:+.1f} ({ranges['wasmtap']}) | {ratio:.2f} | {floor_ratio} | {known} | {check['bpftrace']} | "
              f"{check['wasmtap']} | {rss['bpftrace']:.0f} / {rss['wasmtap']:.0f} | {cpu['bpftrace']:.2f} / {cpu['wasmtap']:.2f} |")
    for n in notes:
        print(f"\n{n}.")


def streaming(quick):
    """printf-style streaming of paced getppid calls: events delivered and lost by each."""
    secs = 1 if quick else 2
    rates = [250_000, 500_000, 1_000_000, 1_500_000, 2_000_000, 3_000_000]
    print("\n## Streaming: one output line per event, paced getppid\n")
    print(f"`paced RATE {secs}` calls getppid at RATE per second for {secs} s; each tracer prints one line per call "
          "(bpftrace `printf`, wasmtap the `snoop` example plugin: one row per event, batched), output to a file. "
          "Lost = calls − lines of the workload's pid; the tracer's own drop report beside it.\n")
    print("| offered rate | achieved calls/s | bpftrace lines | bpftrace lost | wasmtap lines | wasmtap lost | wasmtap drops reported | wasmtap CPU s per M events |")
    print("|---|---|---|---|---|---|---|---|")
    best = {"bpftrace": 0, "wasmtap": 0}
    for rate in rates:
        cells = {}
        for who in ("bpftrace", "wasmtap"):
            if who == "bpftrace":
                t = bt(BT_PRINTF, f"stream-{who}-{rate}")
            else:
                # The plugin may use the whole dispatch thread (its own CPU and the host's
                # rendering of its rows are charged to it) and write as fast as it can.
                t = wasmtap(["snoop", "--output-budget", "4194304", "--cpu-budget", "100", "--stats"],
                            f"stream-{who}-{rate}")
            p = subprocess.run(["taskset", "-c", "1", os.path.join(BIN, "paced"), str(rate), str(secs)],
                               capture_output=True, text=True, check=True)
            ops, achieved = map(float, re.search(r"ops (\d+) rate (\d+)", p.stdout).groups())
            _, _, cpu = t.stop()
            text = t.text()
            lines = sum(1 for l in text.splitlines() if l.rstrip().endswith(" paced"))
            lost = int(ops) - lines
            # What the tracer says it lost: in the kernel, and (wasmtap) dropped by the plugin's budget.
            kernel = re.search(r"(\d+) lost", t.errors())
            dropped = re.search(r"plugin snoop .*? dropped +(\d+)", t.errors())
            said = [int(m.group(1)) for m in (kernel, dropped) if m]
            cells[who] = (lines, lost, sum(said) if said else "-", cpu, achieved)
            if lost == 0:
                best[who] = max(best[who], achieved)
        b, w = cells["bpftrace"], cells["wasmtap"]
        print(f"| {rate:,} | {w[4]:,.0f} | {b[0]:,} | {b[1]:,} ({100 * b[1] / max(1, b[0] + b[1]):.0f} %) | {w[0]:,} | "
              f"{w[1]:,} ({100 * w[1] / max(1, w[0] + w[1]):.0f} %) | {w[2]} | {w[3] / max(1e-9, w[0] / 1e6):.2f} |", flush=True)
    print(f"\nHighest rate with nothing lost: bpftrace {best['bpftrace']:,.0f}/s, wasmtap {best['wasmtap']:,.0f}/s "
          "(of the rates tried).")


PRINTF_ONE_LINER = 'tracepoint:syscalls:sys_enter_getppid { printf("%d %d %s\\n", pid, tid, comm); }'
# `@[tid] = count()` alone runs in the kernel in both tools; the predicate on pid keeps
# wasmtap's in the interpreter, the per-event action this row measures.
MAP_ONE_LINER = "tracepoint:syscalls:sys_enter_getppid /pid != 0/ { @[tid] = count(); }"


def plugin_cpu(errors, name):
    """(CPU ms, events delivered) of plugin `name` in a --stats report."""
    m = re.search(rf"plugin {name} +delivered +(\d+) .*?cpu (\d+) ms", errors)
    return (int(m.group(2)), int(m.group(1))) if m else (float("nan"), 0)


def oneliners(quick):
    """bpftrace's one-liners run by the script plugin: printf and a map update per event,
    beside bpftrace and beside compiled Rust plugins doing the same, at paced rates."""
    secs = 1 if quick else 2
    rates = [250_000, 500_000, 1_000_000]
    print("\n## One-liners: interpreted in the sandbox\n")
    print(f"`paced RATE {secs}` calls getppid at RATE per second for {secs} s. printf: `{PRINTF_ONE_LINER}` in "
          "bpftrace and in `wasmtap -e`, beside the compiled `snoop` plugin (one row per event). Map update: "
          f"`{MAP_ONE_LINER}` in `wasmtap -e` (interpreted per event), bpftrace's `@[tid] = count()`, and the "
          "compiled `aggbench` fixture on the same tracepoint (`agg=count`, a count keyed by thread per event). Lost = calls − "
          "lines or counts of the workload; plugin CPU per M events from `--stats`.\n")
    print("| rate | what | bpftrace lost | wasmtap -e lost | wasmtap -e plugin CPU ms / M events | compiled plugin CPU ms / M events | interpreted / compiled |")
    print("|---|---|---|---|---|---|---|")
    budget = ["--output-budget", "4194304", "--cpu-budget", "100", "--stats"]
    for rate in rates:
        for what in ("printf", "map update"):
            cells = {}
            for who in ("bpftrace", "script", "compiled"):
                name = f"oneliner-{who}-{what.replace(' ', '')}-{rate}"
                if who == "bpftrace":
                    t = bt(PRINTF_ONE_LINER if what == "printf" else BT_MAP_TID, name)
                elif who == "script":
                    t = Tracer([WASMTAP, "-e", PRINTF_ONE_LINER if what == "printf" else MAP_ONE_LINER] + budget,
                               "Attached", name)
                elif what == "printf":
                    t = wasmtap(["snoop", "--param", "probe=tracepoint:syscalls:sys_enter_getppid"] + budget, name)
                else:
                    t = wasmtap(["aggbench", "--param", "agg=count", "--param", "probe=tracepoint:syscalls:sys_enter_getppid"] + budget, name)
                p = subprocess.run(["taskset", "-c", "1", os.path.join(BIN, "paced"), str(rate), str(secs)],
                                   capture_output=True, text=True, check=True)
                ops = int(re.search(r"ops (\d+)", p.stdout).group(1))
                t.stop()
                text = t.text()
                if what == "printf":
                    seen = sum(1 for l in text.splitlines() if l.rstrip().endswith("paced"))
                else:
                    seen = max([int(n) for n in re.findall(r"^@\[\d+\]: (\d+)", text, re.M)] or [0])
                cpu, delivered = plugin_cpu(t.errors(), {"script": "script", "compiled": "snoop" if what == "printf" else "aggbench"}.get(who, "-"))
                cells[who] = (ops - seen if who != "compiled" or what == "printf" else "-", cpu * 1e6 / max(1, delivered))
            b, s_, c = cells["bpftrace"], cells["script"], cells["compiled"]
            print(f"| {rate:,} | {what} | {b[0]:,} | {s_[0]:,} | {s_[1]:,.0f} | {c[1]:,.0f} | {s_[1] / max(1e-9, c[1]):.2f} |",
                  flush=True)
    # Start to first event of one one-liner, the same text in both (the script plugin
    # compiled once before, as any plugin comes from the cache).
    first = 'tracepoint:syscalls:sys_exit_execve /comm == "true"/ { printf("first %d\\n", pid); }'
    subprocess.run([WASMTAP, "-e", first, "-c", "/bin/true"], capture_output=True)
    times = {"bpftrace": [], "wasmtap -e": []}
    for r in range(2 if quick else 5):
        for who in times:
            tool = ["bpftrace"] if who == "bpftrace" else [WASMTAP]
            path = os.path.join(TMP, f"oneliner-start-{who.replace(' ', '')}-{r}.out")
            out = open(path, "wb")
            t0 = time.monotonic()
            p = subprocess.Popen(tool + ["-e", first, "-c", "/bin/true"], stdout=out, stderr=subprocess.DEVNULL)
            seen = None
            while time.monotonic() - t0 < 30:
                if "first " in open(path, "rb").read().decode(errors="replace"):
                    seen = time.monotonic() - t0
                    break
                if p.poll() is not None and "first " not in open(path, "rb").read().decode(errors="replace"):
                    break
                time.sleep(0.001)
            p.wait()
            times[who].append(1000 * seen if seen is not None else float("nan"))
    print(f"\nStart to first event of `{first}` with `-c /bin/true`, ms: bpftrace {med(times['bpftrace']):.0f} "
          f"({rng(times['bpftrace'])}), wasmtap -e {med(times['wasmtap -e']):.0f} ({rng(times['wasmtap -e'])}).")


def startup(rounds):
    """Start to first event, and stop time, for a cached plugin and bpftrace."""
    subprocess.run(wt("execsnoop", "-c", "/bin/true"), capture_output=True)  # warm the plugin cache
    res = {"bpftrace": [], "wasmtap": []}
    stops = {"bpftrace": [], "wasmtap": []}
    peaks = {"bpftrace": [], "wasmtap": []}
    for r in range(rounds):
        for who in ("bpftrace", "wasmtap"):
            if who == "bpftrace":
                cmd = ["bpftrace", "-e", 'tracepoint:syscalls:sys_exit_execve /comm == "true"/ { printf("first %d\\n", pid); }', "-c", "/bin/true"]
                needle = "first "
            else:
                cmd = wt("execsnoop", "-c", "/bin/true")
                needle = "/bin/true"
            path = os.path.join(TMP, f"start-{who}-{r}.out")
            out = open(path, "wb")
            seen = lambda: needle in open(path, "rb").read().decode(errors="replace")
            t0 = time.monotonic()
            # Not pinned: nothing else runs, and start-up uses both CPUs.
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
            first = None
            while time.monotonic() - t0 < 30:
                if seen():
                    first = time.monotonic() - t0
                    break
                if p.poll() is not None:
                    if seen():
                        first = time.monotonic() - t0
                    break
                time.sleep(0.001)
            p.wait()
            res[who].append(1000 * first if first is not None else float("nan"))
            # Stop time of a system-wide tracer with a live aggregation.
            t = bt(BT_COUNT, f"stop-{who}-{r}") if who == "bpftrace" else wasmtap(["syscount"], f"stop-{who}-{r}")
            secs, peak, _ = t.stop()
            stops[who].append(1000 * secs)
            peaks[who].append(peak)
    print("\n## Start-up and stop\n")
    print("Start to first event: from spawning the tracer (not pinned) to the first line of a traced `/bin/true` "
          "exec (`-c /bin/true`; wasmtap's execsnoop compiled once before, so it comes from the plugin cache). "
          "Stop: from SIGINT to exit, for a system-wide syscall count. Peak RSS: VmHWM of that count.\n")
    print("| measure | bpftrace | wasmtap |")
    print("|---|---|---|")
    print(f"| start to first event, ms | {med(res['bpftrace']):.0f} ({rng(res['bpftrace'])}) | {med(res['wasmtap']):.0f} ({rng(res['wasmtap'])}) |")
    print(f"| stop, ms | {med(stops['bpftrace']):.0f} ({rng(stops['bpftrace'])}) | {med(stops['wasmtap']):.0f} ({rng(stops['wasmtap'])}) |")
    print(f"| peak RSS of a syscall count, MiB | {med(peaks['bpftrace']):.0f} ({rng(peaks['bpftrace'])}) | {med(peaks['wasmtap']):.0f} ({rng(peaks['wasmtap'])}) |")


BENCH_USER = "wtbench"


class SharedHost:
    """A daemon on a socket of its own, pinned to CPU 0 like every tracer, serving
    BENCH_USER (created here if missing, and removed by `close` if so) from a directory
    every user can read: the binary, its plugins and the workloads."""

    def __init__(self):
        self.made_user = subprocess.run(["id", BENCH_USER], capture_output=True).returncode != 0
        if self.made_user:
            subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", BENCH_USER],
                           check=True)
        self.dir = tempfile.mkdtemp(prefix="wasmtap-bench-daemon-")
        os.chmod(self.dir, 0o755)
        os.makedirs(os.path.join(self.dir, "plugins"))
        subprocess.run(["cp", WASMTAP, os.path.join(self.dir, "wasmtap")], check=True)
        wasm = os.path.join(ROOT, "target/wasm32-wasip2/wasm")
        for plugin in ("syscount", "snoop"):
            subprocess.run(["cp", os.path.join(wasm, f"{plugin}.wasm"), os.path.join(self.dir, "plugins")], check=True)
        for w in ("w1_getppid", "paced"):
            subprocess.run(["cp", os.path.join(BIN, w), self.dir], check=True)
        # The quotas of a tenant that may use what the direct run uses: a whole CPU for its
        # plugin, the rates measured, and output as fast as it comes.
        policy = os.path.join(self.dir, "policy.toml")
        with open(policy, "w") as f:
            f.write(f'[[tenant]]\nusers = ["{BENCH_USER}"]\nscope = "own"\nprobes = ["syscall"]\nplugins = "any"\n'
                    "[tenant.quotas]\ncpu_percent = 100\nevents_per_sec = 100000000\noutput_kib_per_sec = 4194304\n")
        self.socket = os.path.join(self.dir, "wasmtap.sock")
        self.p = subprocess.Popen(["taskset", "-c", "0", os.path.join(self.dir, "wasmtap"), "daemon", "--policy", policy,
                                   "--socket", self.socket], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.p.poll() is not None:
                self.close()
                raise SystemExit("bench: the daemon did not start")
            time.sleep(0.02)

    def run(self, args, name):
        cmd = [os.path.join(self.dir, "wasmtap"), "run", *args, "--daemon", self.socket]
        return Tracer(cmd, "Attached", name, user=BENCH_USER)

    def close(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait()
        subprocess.run(["rm", "-rf", self.dir])
        if self.made_user:
            subprocess.run(["userdel", BENCH_USER], capture_output=True)


def daemon(rounds, quick):
    """W1 count by comm and paced streaming: bpftrace, root's direct run, and a tenant's
    run through the daemon (its workload its own), in one run."""
    host = SharedHost()
    try:
        arg = 300_000 if quick else 3_000_000
        comm = "w1_getppid"
        ns = {"none": [], "bpftrace": [], "direct": [], "daemon": []}
        counts = {"bpftrace": [], "direct": [], "daemon": []}
        args = ["syscount", "--param", "by=process", "--param", "top=0"]
        starts = {
            "bpftrace": (lambda n: bt(BT_COUNT, n), rf"@\[{comm}\]: (\d+)"),
            "direct": (lambda n: wasmtap(args, n), rf"@process\[{comm}\]: (\d+)"),
            "daemon": (lambda n: host.run(args, n), rf"@process\[{comm}\]: (\d+)"),
        }
        ops = 0
        for r in range(rounds):
            ops, x = run_workload(comm, arg, BENCH_USER, host.dir)
            ns["none"].append(x)
            for who, (start, pat) in starts.items():
                t = start(f"daemon-W1-{who}-{r}")
                _, x = run_workload(comm, arg, BENCH_USER, host.dir)
                t.stop()
                ns[who].append(x)
                counts[who].append(count_of(t.text(), pat))
        base = med(ns["none"])
        added = {w: med(ns[w]) - base for w in counts}
        check = {w: ", ".join(f"{c - ops:+d}" if c is not None else "missing" for c in counts[w]) for w in counts}
        print("\n## Through the shared host\n")
        print(f"W1 ({arg:,} getppid calls, run as the tenant `{BENCH_USER}`), count by comm: bpftrace "
              "`@[comm] = count()`, root's `wasmtap run syscount --param by=process --param top=0`, and the same "
              "command by the tenant through `wasmtap daemon` (its scope, its own uid, ANDed in the kernel). "
              "Medians of the rounds, ranges in brackets; counts minus the workload's calls.\n")
        print("| none ns/op | bpftrace added | direct added | daemon added | daemon/direct | direct/bpftrace | daemon/bpftrace | counts − known: bpftrace / direct / daemon |")
        print("|---|---|---|---|---|---|---|---|")
        ratio = lambda a, b: a / b if b > 0 else float("nan")
        print(f"| {base:.1f} ({rng(ns['none'])}) | " + " | ".join(
            f"{added[w]:+.1f} ({rng([x - base for x in ns[w]])})" for w in ("bpftrace", "direct", "daemon")) +
              f" | {ratio(added['daemon'], added['direct']):.2f} | {ratio(added['direct'], added['bpftrace']):.2f} | "
              f"{ratio(added['daemon'], added['bpftrace']):.2f} | {check['bpftrace']} / {check['direct']} / {check['daemon']} |",
              flush=True)

        secs = 1 if quick else 2
        rates = [500_000, 625_000, 750_000, 875_000, 1_000_000, 1_250_000, 1_500_000]
        print(f"\nStreaming: `paced RATE {secs}` as the tenant; bpftrace `printf`, and the `snoop` example plugin "
              "(one row per event) run by root directly and by the tenant through the daemon, output to a file. "
              "Lost = calls − lines.\n")
        print("| offered rate | achieved calls/s | bpftrace lost | direct lines | direct lost | daemon lines | daemon lost |")
        print("|---|---|---|---|---|---|---|")
        best = {"bpftrace": 0, "direct": 0, "daemon": 0}
        snoop = ["snoop", "--output-budget", "4194304", "--cpu-budget", "100"]
        for rate in rates:
            cells = {}
            for who in ("bpftrace", "direct", "daemon"):
                name = f"daemon-stream-{who}-{rate}"
                t = bt(BT_PRINTF, name) if who == "bpftrace" else wasmtap(snoop, name) if who == "direct" else host.run(snoop, name)
                p = subprocess.run(["taskset", "-c", "1", os.path.join(host.dir, "paced"), str(rate), str(secs)],
                                   capture_output=True, text=True, check=True, user=BENCH_USER, group=BENCH_USER,
                                   extra_groups=[])
                ops, achieved = map(float, re.search(r"ops (\d+) rate (\d+)", p.stdout).groups())
                t.stop()
                lines = sum(1 for l in t.text().splitlines() if l.rstrip().endswith(" paced"))
                cells[who] = (lines, int(ops) - lines, achieved)
                if int(ops) == lines:
                    best[who] = max(best[who], achieved)
            b, d, w = cells["bpftrace"], cells["direct"], cells["daemon"]
            print(f"| {rate:,} | {d[2]:,.0f} | {b[1]:,} | {d[0]:,} | {d[1]:,} | {w[0]:,} | {w[1]:,} |", flush=True)
        print(f"\nHighest rate with nothing lost: bpftrace {best['bpftrace']:,.0f}/s, direct {best['direct']:,.0f}/s, "
              f"through the daemon {best['daemon']:,.0f}/s ({ratio(best['daemon'], best['direct']):.2f} of direct).")
    finally:
        host.close()


class Scraper:
    """GETs a /metrics endpoint every second on a thread, as Prometheus would."""

    def __init__(self, port):
        import threading
        self.port, self.scrapes, self.bytes, self.failed, self.slowest = port, 0, 0, 0, 0.0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        import urllib.request
        while not self.done.wait(1.0):
            t = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                    self.bytes += len(r.read())
                self.scrapes += 1
                self.slowest = max(self.slowest, time.monotonic() - t)
            except OSError:
                self.failed += 1

    def stop(self):
        self.done.set()
        self.thread.join()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fleet(rounds, quick, soak_seconds):
    """W1 count by comm with and without --serve scraped every second; optionally a soak."""
    wname, binary, full, per_op = WORKLOADS[0]
    # Five times W1's usual size: several seconds, so that several scrapes fall inside.
    arg = max(1, full // 10) if quick else full * 5
    comm = binary[:15]
    ns = {"none": [], "bpftrace": [], "plain": [], "serve": []}
    counts = {"plain": [], "serve": [], "bpftrace": []}
    scrapes = []
    base_args = ["syscount", "--param", "by=process", "--param", "top=0"]
    for r in range(rounds):
        ops, x = run_workload(binary, arg)
        ns["none"].append(x)
        t = bt(BT_COUNT, f"fleet-bt-{r}")
        _, x = run_workload(binary, arg)
        t.stop()
        ns["bpftrace"].append(x)
        counts["bpftrace"].append(count_of(t.text(), rf"@\[{comm}\]: (\d+)"))
        for who in ("plain", "serve"):
            port = free_port()
            extra = ["--serve", f"127.0.0.1:{port}"] if who == "serve" else []
            t = wasmtap(base_args + extra, f"fleet-{who}-{r}")
            scraper = Scraper(port) if who == "serve" else None
            _, x = run_workload(binary, arg)
            if scraper:
                scraper.stop()
                scrapes.append((scraper.scrapes, scraper.failed, scraper.slowest, scraper.bytes))
            t.stop()
            ns[who].append(x)
            counts[who].append(count_of(t.text(), rf"@process\[{comm}\]: (\d+)"))
    base = med(ns["none"])
    print("\n## Fleet export: `--serve` scraped every second\n")
    print(f"W1 ({arg:,} getppid calls on CPU 1), `syscount --param by=process --param top=0` with and without "
          "`--serve`, a scraper GETting /metrics every second for the whole workload; bpftrace's "
          "`@[comm] = count()` for reference. Medians of the rounds, ranges in brackets.\n")
    print("| what | added ns/op | count − known |")
    print("|---|---|---|")
    expect = per_op * arg
    for who, label in (("bpftrace", "bpftrace `@[comm] = count()`"), ("plain", "wasmtap syscount"),
                       ("serve", "wasmtap syscount `--serve`, scraped every 1 s")):
        added = [x - base for x in ns[who]]
        check = ", ".join(f"{c - expect:+d}" if c is not None else "missing" for c in counts[who])
        print(f"| {label} | {med(added):+.1f} ({rng(added)}) | {check} |")
    d = med(ns["serve"]) - med(ns["plain"])
    print(f"\n`--serve` minus without: {d:+.1f} ns/op. Scrapes per round (answered, failed, slowest s, bytes): "
          + "; ".join(f"{a}, {f}, {s:.3f}, {b}" for a, f, s, b in scrapes) + ".")
    if soak_seconds:
        soak(soak_seconds)


def soak(seconds):
    """syscount, runqlat and profile served and scraped every second for `seconds`, with a
    paced getppid storm and a fork/exec burst every 10 s; RSS sampled every 10 s.

    Each burst also runs 20 short processes (30 ms of CPU each in a function of their own,
    so profile samples and symbolizes them) from a pool of 256 distinct binaries owned by
    nobody: the symbolizer copies each (a file a user may change is never mapped), and with
    64 files held at most it closes and reopens them all the time, over thousands of
    processes."""
    pool = tempfile.mkdtemp(prefix="wasmtap-soak-bins-")
    os.chmod(pool, 0o755)
    spin = os.path.join(pool, "spin")
    subprocess.run(["cc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", spin,
                    os.path.join(ROOT, "tests/workloads/spin_func.c")], check=True)
    bins = []
    for i in range(256):
        b = os.path.join(pool, f"spin{i:03}")
        shutil.copy(spin, b)
        os.chown(b, 65534, 65534)
        bins.append(b)
    spawned = 0
    port = free_port()
    t = wasmtap(["syscount", "runqlat", "profile", "--param", "syscount.by=syscall,process,syscall-process",
                 "--serve", f"127.0.0.1:{port}"], "fleet-soak")
    scraper = Scraper(port)
    started = time.monotonic()
    samples = []
    # The heap apart from the rings and the mapped binary (RssFile: the collectors' rings
    # are counted there, and grow until each has wrapped once).
    anon = []
    storm = subprocess.Popen(["taskset", "-c", "1", os.path.join(BIN, "paced"), "50000", str(seconds)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while time.monotonic() - started < seconds:
        subprocess.run(["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done"], check=False)
        for _ in range(20):
            subprocess.run([bins[spawned % len(bins)], "30"], stdout=subprocess.DEVNULL, check=False)
            spawned += 1
        try:
            status = {l.split(":")[0]: int(l.split()[1]) for l in open(f"/proc/{t.p.pid}/status")
                      if l.startswith(("VmRSS:", "RssAnon:", "RssFile:"))}
            samples.append((time.monotonic() - started, status["VmRSS"]))
            anon.append((time.monotonic() - started, status["RssAnon"], status["RssFile"]))
        except OSError:
            break
        time.sleep(10)
    storm.kill()
    scraper.stop()
    t.stop()
    shutil.rmtree(pool, ignore_errors=True)
    first = [k for s, k in samples if s < 120]
    last = [k for s, k in samples if s > seconds - 120]
    later = [(s, k) for s, k in samples if s >= 120]
    slope = 0.0
    if len(later) > 2:
        mx = statistics.mean(s for s, _ in later)
        my = statistics.mean(k for _, k in later)
        slope = sum((s - mx) * (k - my) for s, k in later) / sum((s - mx) ** 2 for s, _ in later) * 3600
    print(f"\nSoak: {seconds / 3600:.2f} h of syscount (three maps), runqlat and profile served and scraped every "
          f"second ({scraper.scrapes} scrapes, {scraper.failed} failed, slowest {scraper.slowest:.3f} s), with a "
          f"paced getppid storm (50,000/s), ten exec and {spawned} short processes in all from 256 binaries "
          f"owned by nobody (20 every 10 s). RSS: first two minutes {min(first)}-{max(first)} KiB, "
          f"last two minutes {min(last)}-{max(last)} KiB, peak {max(k for _, k in samples)} KiB; "
          f"least-squares growth after the first two minutes {slope:+.0f} KiB/hour. RSS each five minutes (KiB): "
          + ", ".join(f"{s / 60:.0f} min {k}" for s, k in samples if int(s) % 300 < 10) + ".")
    later = [(s, a) for s, a, _ in anon if s >= 120]
    if len(later) > 2:
        mx = statistics.mean(s for s, _ in later)
        my = statistics.mean(a for _, a in later)
        slope = sum((s - mx) * (a - my) for s, a in later) / sum((s - mx) ** 2 for s, _ in later) * 3600
    print("RssAnon (the heap) and RssFile (binary and rings) each five minutes (KiB): "
          + ", ".join(f"{s / 60:.0f} min {a}+{f}" for s, a, f in anon if int(s) % 300 < 10)
          + f"; least-squares growth of RssAnon after the first two minutes {slope:+.0f} KiB/hour.")


def micro():
    print("\n## Micro-benchmarks (host/benches/micro.rs)\n")
    p = subprocess.run(["cargo", "bench", "--quiet", "-p", "wasmtap", "--bench", "micro"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"(failed: {p.stderr[-2000:]})")
    else:
        print(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="a tenth of each workload, 1 round where unset")
    ap.add_argument("--only", default="overhead,streaming,startup,micro")
    ap.add_argument("--soak-seconds", type=int, default=0, help="with --only fleet: also a soak this long (--only soak: the soak alone, an hour unless told)")
    ap.add_argument("--workloads", default=",".join(w[0] for w in WORKLOADS),
                    help="the overhead section's workloads, e.g. W1,W5")
    a = ap.parse_args()
    unknown = set(a.workloads.split(",")) - {w[0] for w in WORKLOADS}
    if unknown:
        sys.exit(f"bench/run.py: unknown workload {', '.join(sorted(unknown))} (W1 to W5)")
    if os.geteuid() != 0:
        sys.exit("bench/run.py needs root (BPF)")
    build()
    only = set(a.only.split(","))
    print("# wasmtap vs bpftrace\n")
    print(f"Machine: {machine()}. {time.strftime('%Y-%m-%d')}. {a.rounds} rounds, alternating.")
    if "overhead" in only:
        overhead(a.rounds, a.quick, set(a.workloads.split(",")))
    if "streaming" in only:
        streaming(a.quick)
    if "startup" in only:
        startup(a.rounds)
    if "micro" in only:
        micro()
    if "daemon" in only:
        daemon(a.rounds, a.quick)
    if "oneliners" in only:
        oneliners(a.quick)
    if "fleet" in only:
        fleet(a.rounds, a.quick, a.soak_seconds)
    elif "soak" in only:
        soak(a.soak_seconds or 3600)


if __name__ == "__main__":
    main()
