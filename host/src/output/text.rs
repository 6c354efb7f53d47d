//! Text rendering: aligned columns, `@name[key]: value` maps and bpftrace's histograms,
//! the accounting summary.

use std::fmt::Write as _;

use super::entries::percentile_label;
use super::Cell;
use crate::clock::Clock;
use crate::wit::types::{
    AggEntry, AggKind, AggValue, Aggregation, Bucket, ColumnKind, Frame, Histogram, Quantiles, TableSpec, Value,
};

/// bpftrace indents each frame of a stack key by eight spaces.
const STACK_INDENT: &str = "        ";
/// Columns of a histogram bar at its longest, as in bpftrace.
const BAR_WIDTH: u128 = 52;

pub(super) fn header(table: &TableSpec) -> String {
    let cells = table.columns.iter().map(|c| (c.name.clone(), c.kind, c.width as usize));
    join_cells(cells)
}

/// Padding for right-aligned integers, without an allocation for the usual widths.
const SPACES: &str = "                                                                ";

pub(super) fn row(table: &TableSpec, cells: &[Cell<'_>], clock: &Clock) -> String {
    // One buffer per row, cells written in place: rows stream at millions a second.
    let mut out = String::with_capacity(96);
    let n = table.columns.len().min(cells.len());
    for (i, (c, v)) in table.columns.iter().zip(cells).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let start = out.len();
        match (*v, c.kind) {
            (Cell::Int(ns), ColumnKind::Timestamp) => push_clock_time(&mut out, clock.wall_of(ns as u64)),
            (Cell::Int(x), _) => push_int(&mut out, x),
            (Cell::Text(s), _) => push_sanitized(&mut out, s),
            (Cell::Stack(frames), _) => out.push_str(&super::folded::stack(frames)),
        }
        let width = c.width as usize;
        let cell = &out[start..];
        let len = if cell.is_ascii() { cell.len() } else { cell.chars().count() };
        if len < width {
            match c.kind {
                ColumnKind::Integer => match SPACES.get(..width - len) {
                    Some(pad) => out.insert_str(start, pad),
                    None => out.insert_str(start, &" ".repeat(width - len)),
                },
                _ if i + 1 == n => {}
                _ => out.extend(std::iter::repeat_n(' ', width - len)),
            }
        }
    }
    out
}

fn join_cells(cells: impl Iterator<Item = (String, ColumnKind, usize)>) -> String {
    let cells: Vec<_> = cells.collect();
    let last = cells.len().saturating_sub(1);
    let mut out = String::new();
    for (i, (s, kind, width)) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match kind {
            ColumnKind::Integer => out.push_str(&format!("{s:>width$}")),
            _ if i == last => out.push_str(&s),
            _ => out.push_str(&format!("{s:<width$}")),
        }
    }
    out
}

/// Control characters from traced programs must not drive the user's terminal.
pub(super) fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_sanitized(&mut out, s);
    out
}

/// Text with control characters other than newlines and tabs as `?`.
pub(super) fn sanitize_lines(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    match s.chars().any(bad) {
        true => s.chars().map(|c| if bad(c) { '?' } else { c }).collect::<String>().into(),
        false => s.into(),
    }
}

/// `s` appended to `out` with control characters as `?`.
fn push_sanitized(out: &mut String, s: &str) {
    if s.chars().any(char::is_control) {
        out.extend(s.chars().map(|c| if c.is_control() { '?' } else { c }));
    } else {
        out.push_str(s);
    }
}

/// `HH:MM:SS.mmm` (UTC) of a wall-clock time in nanoseconds, appended to `out`.
fn push_clock_time(out: &mut String, wall_ns: u64) {
    let secs = wall_ns / 1_000_000_000;
    let ms = (wall_ns / 1_000_000) % 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    // HH:MM:SS.mmm by hand: `write!` with padding was a tenth of streaming's host time.
    let digit = |d: u64| char::from(b'0' + d as u8);
    for (v, sep) in [(h, ':'), (m, ':'), (s, '.')] {
        out.push(digit(v / 10));
        out.push(digit(v % 10));
        out.push(sep);
    }
    out.push(digit(ms / 100));
    out.push(digit(ms / 10 % 10));
    out.push(digit(ms % 10));
}

/// An integer in decimal, without the formatting machinery.
fn push_int(out: &mut String, x: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = x.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if x < 0 {
        out.push('-');
    }
    out.extend(buf[i..].iter().map(|b| char::from(*b)));
}

/// A key as bpftrace prints it between `[` and `]`: parts joined by `, `, a stack as a
/// newline and one indented `function+offset` line per frame, innermost first.
pub(super) fn key(parts: &[Value]) -> String {
    parts
        .iter()
        .map(|v| match v {
            Value::Int(i) => i.to_string(),
            Value::Text(s) => sanitize(s),
            Value::Stack(frames) => stack(frames),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` (file.c:21)` where the binary has line information; empty otherwise.
fn source(f: &Frame) -> String {
    if f.file.is_empty() {
        return String::new();
    }
    let name = sanitize(f.file.rsplit('/').next().unwrap_or(&f.file));
    match f.line {
        0 => format!(" ({name})"),
        line => format!(" ({name}:{line})"),
    }
}

fn stack(frames: &[Frame]) -> String {
    let mut s = String::from("\n");
    for f in frames {
        match f.symbol.is_empty() {
            true => writeln!(s, "{STACK_INDENT}{:#x}", f.addr),
            false => writeln!(s, "{STACK_INDENT}{}+{}{}", sanitize(&f.symbol), f.offset, source(f)),
        }
        .expect("writing to a String");
    }
    s
}

/// An aggregation: its title, then each entry as `@name[key]: value` (a histogram as a
/// `@name[key]:` line, its bars and a blank line), then a blank line after scalars.
pub(super) fn aggregation(agg: &Aggregation, entries: &[&AggEntry]) -> String {
    let mut out = String::new();
    if !agg.title.is_empty() {
        out.push_str(&sanitize_lines(&agg.title));
        out.push('\n');
    }
    let mut ends_blank = false;
    let agg_name = sanitize(&agg.name);
    for entry in entries {
        let name = match agg.key_names.is_empty() {
            true => format!("@{agg_name}"),
            false => format!("@{agg_name}[{}]", key(&entry.key)),
        };
        ends_blank = matches!(entry.value, AggValue::Histogram(_));
        match &entry.value {
            AggValue::Scalar(v) => out.push_str(&format!("{name}: {v}\n")),
            AggValue::Quantiles(q) => out.push_str(&format!("{name}: {}\n", quantiles(q))),
            AggValue::Histogram(h) => out.push_str(&format!("{name}:\n{}\n", histogram(agg.kind, h))),
        }
    }
    if !ends_blank {
        out.push('\n');
    }
    out
}

/// `count 7, p50 3, p99.9 12`.
fn quantiles(q: &Quantiles) -> String {
    let mut s = format!("count {}", q.count);
    for p in &q.points {
        write!(s, ", p{} {}", percentile_label(p.millionths), p.value).expect("writing to a String");
    }
    s
}

/// One line per bucket given, as bpftrace's `hist`/`lhist` print them: the range in 16
/// columns, the count in 8, and a bar of up to 52 `@` scaled to the largest bucket.
fn histogram(kind: AggKind, h: &Histogram) -> String {
    let max = h.buckets.iter().map(|b| b.count).max().unwrap_or(0);
    let suffixes = suffixes(kind, &h.buckets);
    let mut out = String::new();
    for b in &h.buckets {
        let bar = match max {
            0 => 0,
            _ => (u128::from(b.count) * BAR_WIDTH / u128::from(max)) as usize,
        };
        let label = bucket_label(b, suffixes);
        writeln!(out, "{label:<16}{:>8} |{:<52}|", b.count, "@".repeat(bar)).expect("writing to a String");
    }
    out
}

/// Which power-of-1024 suffixes bucket bounds may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Suffixes {
    None,
    /// `K` and `M`, as bpftrace's `lhist` when its step is a multiple of 1024.
    KiloMega,
    /// `K` to `E`, as bpftrace's `hist`.
    All,
}

fn suffixes(kind: AggKind, buckets: &[Bucket]) -> Suffixes {
    match kind {
        AggKind::Lquantize => {
            let step =
                buckets.iter().find(|b| b.low != i64::MIN && b.high != i64::MAX).map(|b| b.high.wrapping_sub(b.low));
            match step {
                Some(step) if step > 0 && step % 1024 == 0 => Suffixes::KiloMega,
                _ => Suffixes::None,
            }
        }
        _ => Suffixes::All,
    }
}

/// `[0]`, `[2, 4)`, `[1K, 2K)`, `(..., 0)` for underflow, `[100, ...)` for overflow.
/// The lowest power-of-two bucket holds `i64::MIN` alone: `[-8E]`.
fn bucket_label(b: &Bucket, suffixes: Suffixes) -> String {
    let n = |v: i64| bound(v, suffixes);
    if b.high != i64::MAX && b.low.checked_add(1) == Some(b.high) {
        return format!("[{}]", n(b.low));
    }
    match (b.low == i64::MIN, b.high == i64::MAX) {
        (true, true) => "(..., ...)".to_string(),
        (true, false) => format!("(..., {})", n(b.high)),
        (false, true) => format!("[{}, ...)", n(b.low)),
        (false, false) => format!("[{}, {})", n(b.low), n(b.high)),
    }
}

/// A bound with the largest power-of-1024 suffix that divides it exactly.
fn bound(v: i64, suffixes: Suffixes) -> String {
    let largest = match suffixes {
        Suffixes::None => 0,
        Suffixes::KiloMega => 2,
        Suffixes::All => 6,
    };
    if v != 0 {
        for power in (1..=largest).rev() {
            let unit = 1i64 << (10 * power);
            if v % unit == 0 {
                return format!("{}{}", v / unit, &"KMGTPE"[power - 1..power]);
            }
        }
    }
    v.to_string()
}

pub(super) fn accounting(report: &crate::accounting::Accounting) -> Vec<String> {
    let mut lines = vec![format!(
        "wasmtap: {} events from the kernel, {} filtered in the kernel, {} lost",
        report.kernel.kinds.values().map(|k| k.emitted).sum::<u64>(),
        report.kernel.kinds.values().map(|k| k.filtered).sum::<u64>(),
        report.lost()
    )];
    for (kind, k) in &report.kernel.kinds {
        let mut line = format!(
            "  {:<10} emitted {:>10}  filtered {:>10}  ring-full drops {:>8}",
            crate::accounting::kind_name(*kind),
            k.emitted,
            k.filtered,
            k.dropped
        );
        if k.lost > 0 {
            line += &format!("  lost {:>8}", k.lost);
        }
        lines.push(line);
    }
    if let Some(a) = report.kernel.aggregated {
        lines.push(format!(
            "  {:<10} aggregated {:>7}  filtered {:>10}  map-full drops {:>9}",
            "kernel-agg", a.emitted, a.filtered, a.dropped
        ));
    }
    if report.kernel.pipeline_dropped > 0 {
        lines.push(format!("  pipeline full: {} events dropped", report.kernel.pipeline_dropped));
    }
    for (reason, n) in &report.kernel.losses {
        lines.push(format!("  kernel loss {}: {n} {}", reason.name(), reason.unit()));
    }
    for p in &report.plugins {
        lines.push(plugin_line(p));
        lines.push(format!("    limits: {}; code {}", limits(&p.limits), p.code));
        for a in &p.aggregation_losses {
            lines.push(format!(
                "    aggregation {}: agg_map_full {}, start_map_full {}",
                a.aggregation, a.lost.agg_map_full, a.lost.start_map_full
            ));
        }
        for s in &p.probes {
            let mut line = format!("    {}: ", s.probe);
            // Timers' ticks are made in the host.
            let timer = ["interval:", "begin", "end"].iter().any(|t| s.probe.starts_with(t));
            if timer {
                line += &format!("ticks {}; ", s.generated);
            } else if s.generated > 0 && s.kernel_lost > 0 {
                line += &format!(
                    "kernel {} = filtered {} + ring-full {} + lost {} + emitted {}; ",
                    s.generated, s.kernel_filtered, s.ring_dropped, s.kernel_lost, s.emitted
                );
            } else if s.generated > 0 {
                line += &format!(
                    "kernel {} = filtered {} + ring-full {} + emitted {}; ",
                    s.generated, s.kernel_filtered, s.ring_dropped, s.emitted
                );
            }
            line += &format!(
                "host: filtered {}, delivered {}, dropped {} (budget {}, fault {})",
                s.filtered,
                s.delivered,
                s.dropped_budget + s.dropped_fault,
                s.dropped_budget,
                s.dropped_fault
            );
            lines.push(line);
        }
    }
    if let Some(c) = &report.collectors {
        lines.extend(collector_cost(c));
    }
    lines.extend(bounds(&report.bounds));
    let host = &report.host;
    if host.peak_rss_bytes > 0 {
        lines.push(format!("  host: resident {} MiB, peak {} MiB", host.rss_bytes >> 20, host.peak_rss_bytes >> 20));
        if host.ring_bytes + host.queue_peak_bytes + host.plugin_memory_peak_bytes > 0 {
            let mib = |b: u64| format!("{:.1}", b as f64 / f64::from(1u32 << 20));
            lines.push(format!(
                "    peak by part, MiB: rings {}, event queue {}, plugin memories {}, the rest (code, heap, start-up) {}",
                mib(host.ring_bytes),
                mib(host.queue_peak_bytes),
                mib(host.plugin_memory_peak_bytes),
                mib(host.rest_bytes())
            ));
        }
    }
    lines
}

/// `run: at most N events/s…` and `cgroup v1: memory …`: what the run was held to.
fn bounds(b: &crate::accounting::RunBounds) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(n) = b.events_per_sec {
        lines.push(format!("  quota: at most {n} events a second from the kernel (the rest lost as `quota`)"));
    }
    if let Some(c) = &b.cgroup {
        let mut held = Vec::new();
        if let Some(m) = c.memory_bytes {
            held.push(format!("memory {} MiB", m >> 20));
        }
        if let Some(p) = c.cpu_percent {
            held.push(format!("cpu {p}% of one CPU"));
        }
        if let Some(t) = c.tasks {
            held.push(format!("{t} tasks"));
        }
        let held = if held.is_empty() { "no limits".to_string() } else { held.join(", ") };
        lines.push(format!("  cgroup {}: {held} ({})", c.version, c.dirs.join(", ")));
    }
    lines
}

/// `plugin NAME delivered … dropped … (budget …, fault …)…`, with its faults and status.
fn plugin_line(p: &crate::accounting::PluginStats) -> String {
    let mut line = format!(
        "  plugin {:<12} delivered {:>10}  filtered {:>8}  dropped {:>8} (budget {}, fault {})  batches {}  cpu {} ms  longest call {} ms",
        p.name, p.delivered, p.filtered, p.dropped, p.dropped_budget, p.dropped_fault, p.batches, p.cpu_ms, p.longest_call_ms
    );
    if p.host_cpu_ms > 0 {
        line += &format!("  host cpu {} ms", p.host_cpu_ms);
    }
    if p.output_dropped > 0 {
        line += &format!("  output dropped {} ({} KiB)", p.output_dropped, p.output_dropped_bytes >> 10);
    }
    if p.ticks_skipped > 0 {
        line += &format!("  ticks skipped {}", p.ticks_skipped);
    }
    if p.symbolize_refused > 0 {
        line += &format!("  symbolize refused {}", p.symbolize_refused);
    }
    if p.faults > 0 || p.restarts > 0 {
        line += &format!("  faults {}  restarts {}", p.faults, p.restarts);
    }
    if let Some(why) = &p.disabled {
        line += &format!("  DISABLED: {why}");
    }
    line
}

/// `memory 64 MiB, deadline 250 ms, …`
fn limits(l: &crate::limits::Limits) -> String {
    let on_fault = match l.on_fault {
        crate::limits::OnFault::Disable => "disable",
        crate::limits::OnFault::Restart => "restart",
    };
    format!(
        "memory {} MiB, deadline {} ms, cpu {}%, output {} KiB/s, state {} entries, instances {}, on fault {on_fault}, crash loop {}",
        l.memory_bytes >> 20,
        l.deadline.as_millis(),
        l.cpu_ms_per_sec / 10,
        l.output_bytes_per_sec >> 10,
        l.state_entries,
        l.instances,
        l.crash_loop
    )
}

/// The overload guard's measurements, one line per program that ran.
fn collector_cost(c: &crate::accounting::CollectorCost) -> Vec<String> {
    if let Some(why) = &c.unmeasured {
        return vec![format!("  collectors' cost: not measured ({why})")];
    }
    let mut lines = vec![format!(
        "  collectors' cost: {:.1}% of one CPU at peak, {:.1}% last (windows {} of {} ms, one per {} s; limit {}%{})",
        c.peak_percent,
        c.last_percent,
        c.windows,
        c.window_ms,
        c.period_ms / 1000,
        c.limit_percent,
        if c.tripped { ", exceeded" } else { "" }
    )];
    for p in c.programs.iter().filter(|p| p.runs > 0) {
        lines.push(format!(
            "    {}: {} runs, {} ns each, peak {:.1}%",
            p.name,
            p.runs,
            p.run_ns / p.runs.max(1),
            p.peak_percent
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::entries::sorted;
    use crate::output::testing::{agg, frame, hist, quantiles as q, scalar, stack as stack_value, text};

    #[test]
    fn integers_and_clock_times_print_as_format_would() {
        for x in [0, 7, -7, 10, 1_234_567, i64::MAX, i64::MIN] {
            let mut s = String::new();
            push_int(&mut s, x);
            assert_eq!(s, x.to_string());
        }
        // 1970-01-01 + 1d 13:05:09.042
        let mut s = String::new();
        push_clock_time(&mut s, ((86_400 + 13 * 3600 + 5 * 60 + 9) * 1000 + 42) * 1_000_000 + 999_999);
        assert_eq!(s, "13:05:09.042");
    }

    #[test]
    fn what_a_run_was_held_to_is_one_line_each() {
        use crate::accounting::{CgroupBounds, RunBounds};
        assert!(bounds(&RunBounds::default()).is_empty());
        let b = RunBounds {
            events_per_sec: Some(100_000),
            cgroup: Some(CgroupBounds {
                version: "v1".into(),
                dirs: vec![
                    "/sys/fs/cgroup/memory/wasmtap/session-3".into(),
                    "/sys/fs/cgroup/cpu/wasmtap/session-3".into(),
                ],
                memory_bytes: Some(448 << 20),
                cpu_percent: Some(150),
                tasks: Some(256),
            }),
        };
        assert_eq!(
            bounds(&b),
            [
                "  quota: at most 100000 events a second from the kernel (the rest lost as `quota`)",
                "  cgroup v1: memory 448 MiB, cpu 150% of one CPU, 256 tasks (/sys/fs/cgroup/memory/wasmtap/session-3, /sys/fs/cgroup/cpu/wasmtap/session-3)",
            ]
        );
    }

    fn render(a: &Aggregation) -> String {
        aggregation(a, &sorted(a))
    }

    fn hist_entry(key: &[Value], buckets: &[(i64, i64, u64)]) -> AggEntry {
        AggEntry { key: key.to_vec(), value: hist(buckets, 0) }
    }

    #[test]
    fn scalars_print_as_bpftrace_maps() {
        let mut a = agg(
            "c",
            AggKind::Count,
            &["comm", "pid"],
            vec![scalar(&[text("swapper/0"), Value::Int(5)], 29), scalar(&[text("sh"), Value::Int(-1)], 1)],
        );
        a.title = "Syscalls by process:".to_string();
        assert_eq!(render(&a), "Syscalls by process:\n@c[sh, -1]: 1\n@c[swapper/0, 5]: 29\n\n");
        let unkeyed = agg("c2", AggKind::Avg, &[], vec![scalar(&[], i64::MIN)]);
        assert_eq!(render(&unkeyed), "@c2: -9223372036854775808\n\n");
        assert_eq!(render(&agg("none", AggKind::Max, &["k"], vec![])), "\n");
    }

    #[test]
    fn control_characters_in_keys_print_as_question_marks() {
        let a = agg(
            "x",
            AggKind::Sum,
            &["k"],
            vec![scalar(&[text("a\u{1b}[31m\tb\nc")], 1), scalar(&[text("日本語 ✓")], 2)],
        );
        assert_eq!(render(&a), "@x[a?[31m?b?c]: 1\n@x[日本語 ✓]: 2\n\n");
    }

    #[test]
    fn stack_keys_print_one_indented_frame_per_line() {
        let s = stack_value(vec![
            frame("pv_native_safe_halt", 11),
            frame("default_idle", 5),
            Frame { addr: 0x7f12_3456, ..frame("", 0) },
            frame("evil\nname", 1),
            Frame { file: "/src/app/main.c".into(), line: 42, ..frame("main", 30) },
            Frame { file: "/src/app/util.c".into(), ..frame("helper", 2) },
        ]);
        let a = agg("", AggKind::Count, &["stack", "comm"], vec![scalar(&[s, text("swapper/0")], 29)]);
        let want = concat!(
            "@[\n",
            "        pv_native_safe_halt+11\n",
            "        default_idle+5\n",
            "        0x7f123456\n",
            "        evil?name+1\n",
            "        main+30 (main.c:42)\n",
            "        helper+2 (util.c)\n",
            ", swapper/0]: 29\n",
            "\n",
        );
        assert_eq!(render(&a), want);
        let empty = agg("s", AggKind::Count, &["stack"], vec![scalar(&[stack_value(vec![])], 3)]);
        assert_eq!(render(&empty), "@s[\n]: 3\n\n");
    }

    /// Compared with bpftrace v0.17's `@h = hist(5); @h = hist(1000); @h = hist(0);
    /// @h = hist(-3)`; bpftrace from 0.20 on prints `@h:` without its trailing space.
    #[test]
    fn log2_histograms_match_bpftrace() {
        let mut buckets = vec![(i64::MIN, 0, 1), (0, 1, 1), (1, 2, 0)];
        buckets.extend((1..10).map(|p| (1i64 << p, 1i64 << (p + 1), u64::from(p == 2 || p == 9))));
        let a = agg("h", AggKind::Quantize, &[], vec![hist_entry(&[], &buckets)]);
        let want = "\
@h:
(..., 0)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[0]                    1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[1]                    0 |                                                    |
[2, 4)                 0 |                                                    |
[4, 8)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[8, 16)                0 |                                                    |
[16, 32)               0 |                                                    |
[32, 64)               0 |                                                    |
[64, 128)              0 |                                                    |
[128, 256)             0 |                                                    |
[256, 512)             0 |                                                    |
[512, 1K)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

";
        assert_eq!(render(&a), want);
    }

    #[test]
    fn bars_scale_to_the_largest_bucket_and_bounds_take_suffixes() {
        let buckets = [(1 << 10, 1 << 11, 3), (1 << 21, 1 << 22, 52), (1 << 31, 1 << 32, 7), (1 << 62, i64::MAX, 1)];
        let a = agg("k", AggKind::Quantize, &["comm"], vec![hist_entry(&[text("x")], &buckets)]);
        let want = "\
@k[x]:
[1K, 2K)               3 |@@@                                                 |
[2M, 4M)              52 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[2G, 4G)               7 |@@@@@@@                                             |
[4E, ...)              1 |@                                                   |

";
        assert_eq!(render(&a), want);
    }

    /// Compared with bpftrace v0.17's `lhist(7, 0, 100, 10)`, `lhist(-5, …)`,
    /// `lhist(500, …)`, and `lhist(5000000, 0, 10000000, 1048576)`.
    #[test]
    fn linear_histograms_match_bpftrace() {
        let mut buckets = vec![(i64::MIN, 0, 1)];
        buckets.extend((0..10).map(|i| (i * 10, i * 10 + 10, u64::from(i == 0))));
        buckets.push((100, i64::MAX, 1));
        let l = agg("l", AggKind::Lquantize, &[], vec![hist_entry(&[], &buckets)]);
        let big = agg("big", AggKind::Lquantize, &[], vec![hist_entry(&[], &[(4 << 20, 5 << 20, 29)])]);
        let want = "\
@l:
(..., 0)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[0, 10)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[10, 20)               0 |                                                    |
[20, 30)               0 |                                                    |
[30, 40)               0 |                                                    |
[40, 50)               0 |                                                    |
[50, 60)               0 |                                                    |
[60, 70)               0 |                                                    |
[70, 80)               0 |                                                    |
[80, 90)               0 |                                                    |
[90, 100)              0 |                                                    |
[100, ...)             1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

@big:
[4M, 5M)              29 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|

";
        assert_eq!(render(&l) + &render(&big), want);
        let odd_step = agg("o", AggKind::Lquantize, &[], vec![hist_entry(&[], &[(1024, 1536, 1), (1536, 2048, 2)])]);
        assert_eq!(
            render(&odd_step),
            "@o:\n[1024, 1536)           1 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n\
             [1536, 2048)           2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n"
        );
    }

    #[test]
    fn extreme_and_odd_buckets_print_without_panicking() {
        let buckets = [
            (i64::MIN, i64::MAX, 0),
            (i64::MIN, i64::MIN + 1, 0),
            (i64::MIN, -(1 << 40), 0),
            (-2047, -1023, 0),
            (-3, -2, u64::MAX),
            (i64::MAX - 1, i64::MAX, 1),
            (5, 5, 0),
        ];
        let a = agg(
            "x",
            AggKind::Llquantize,
            &["k"],
            vec![hist_entry(&[Value::Int(1)], &buckets), hist_entry(&[Value::Int(2)], &[])],
        );
        let want = "\
@x[2]:

@x[1]:
(..., ...)             0 |                                                    |
[-8E]                  0 |                                                    |
(..., -1T)             0 |                                                    |
[-2047, -1023)         0 |                                                    |
[-3]            18446744073709551615 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
[9223372036854775806, ...)       1 |                                                    |
[5, 5)                 0 |                                                    |

";
        assert_eq!(render(&a), want);
    }

    #[test]
    fn percentiles_print_their_count_and_points() {
        let points = [(500_000, 40), (900_000, 80), (990_000, 95), (999_000, -1)];
        let a = agg(
            "lat",
            AggKind::Percentiles,
            &["disk"],
            vec![AggEntry { key: vec![text("sda")], value: q(1000, 9, &points) }],
        );
        assert_eq!(render(&a), "@lat[sda]: count 1000, p50 40, p90 80, p99 95, p99.9 -1\n\n");
    }
}
