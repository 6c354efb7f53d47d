//! Prometheus text exposition (format 0.0.4): each report is one complete block a
//! node-exporter textfile collector or a push gateway accepts.
//!
//! `count` aggregations are counters (`_total`), other scalars gauges, histograms
//! histograms with integer `le` bounds, percentiles summaries. Metric names are
//! `wasmtap_<plugin>_<name>`; key parts become labels named after the key names.

use std::collections::HashSet;
use std::fmt::Write as _;

use super::entries::merged;
use super::folded;
use crate::wit::types::{AggEntry, AggKind, AggValue, Aggregation, Histogram, Quantiles, Value};

/// The four metric types, by the aggregation's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Type {
    fn of(kind: AggKind) -> Type {
        match kind {
            AggKind::Count => Type::Counter,
            AggKind::Sum | AggKind::Min | AggKind::Max | AggKind::Avg | AggKind::Stddev => Type::Gauge,
            AggKind::Quantize | AggKind::Lquantize | AggKind::Llquantize => Type::Histogram,
            AggKind::Percentiles => Type::Summary,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Type::Counter => "counter",
            Type::Gauge => "gauge",
            Type::Histogram => "histogram",
            Type::Summary => "summary",
        }
    }

    /// The samples' name suffixes besides the family's own name.
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            Type::Counter | Type::Gauge => &[""],
            Type::Histogram => &["", "_bucket", "_sum", "_count"],
            Type::Summary => &["", "_sum", "_count"],
        }
    }

    /// Whether an entry's value can be a sample of this type.
    fn fits(self, value: &AggValue) -> bool {
        matches!(
            (self, value),
            (Type::Counter | Type::Gauge, AggValue::Scalar(_))
                | (Type::Histogram, AggValue::Histogram(_))
                | (Type::Summary, AggValue::Quantiles(_))
        )
    }
}

/// One exposition block for a report's aggregations, each with its entries in printed
/// order. Names that would clash inside the block get `_2`, `_3`…
pub(super) fn exposition(plugin: &str, aggs: &[(&Aggregation, Vec<&AggEntry>)]) -> String {
    let mut used = HashSet::new();
    let mut out = String::new();
    for (agg, entries) in aggs {
        family(&mut out, &mut used, plugin, agg, entries);
    }
    out
}

fn family(out: &mut String, used: &mut HashSet<String>, plugin: &str, agg: &Aggregation, entries: &[&AggEntry]) {
    let ty = Type::of(agg.kind);
    let name = family_name(used, plugin, &agg.name, ty);
    let help = if agg.title.is_empty() { agg.name.as_str() } else { agg.title.as_str() };
    let _ = writeln!(out, "# HELP {name} {}", escape(help, false));
    let _ = writeln!(out, "# TYPE {name} {}", ty.name());
    let labels = label_names(&agg.key_names, &[]);
    let series = entries.iter().filter(|e| ty.fits(&e.value)).map(|e| (label_set(&labels, &e.key), &e.value));
    for (labels, value) in merged(agg.kind, series) {
        match &value {
            AggValue::Scalar(v) => {
                let _ = writeln!(out, "{name}{} {v}", braces(&labels, None));
            }
            AggValue::Histogram(h) => histogram(out, &name, &labels, h),
            AggValue::Quantiles(q) => summary(out, &name, &labels, q),
        }
    }
}

/// `wasmtap_<plugin>_<name>` made a valid metric name, `_total` on counters, unique in
/// the block with every name its samples use.
fn family_name(used: &mut HashSet<String>, plugin: &str, name: &str, ty: Type) -> String {
    let stem = metric_name(&format!("wasmtap_{plugin}_{name}"));
    let stem = match ty {
        Type::Counter => stem.strip_suffix("_total").unwrap_or(&stem).to_string(),
        _ => stem,
    };
    let total = if ty == Type::Counter { "_total" } else { "" };
    let mut n = 1;
    loop {
        let candidate = match n {
            1 => format!("{stem}{total}"),
            _ => format!("{stem}_{n}{total}"),
        };
        let names: Vec<String> = ty.suffixes().iter().map(|s| format!("{candidate}{s}")).collect();
        if names.iter().all(|s| !used.contains(s)) {
            used.extend(names);
            return candidate;
        }
        n += 1;
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`: anything else becomes `_`.
pub fn metric_name(s: &str) -> String {
    let mut name: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Label names from key names: `[a-zA-Z_][a-zA-Z0-9_]*`, not `__`-prefixed (reserved),
/// not `le` or `quantile` (histograms' and summaries' own, which promtool refuses on any
/// other type) nor one of `reserved`, no two alike.
pub fn label_names(key_names: &[String], reserved: &[&str]) -> Vec<String> {
    let mut used: HashSet<String> = ["le", "quantile"].iter().chain(reserved).map(|s| s.to_string()).collect();
    let mut names = Vec::with_capacity(key_names.len());
    for key in key_names {
        let mut base: String =
            key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
        if base.is_empty() {
            base = "key".to_string();
        } else if base.starts_with(|c: char| c.is_ascii_digit()) || base.starts_with("__") {
            base.insert_str(0, "key_");
        }
        let mut name = base.clone();
        let mut n = 2;
        while used.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        used.insert(name.clone());
        names.push(name);
    }
    names
}

/// `stack="main;f",comm="sh"`: the key's parts under the label names, stacks folded.
fn label_set(names: &[String], key: &[Value]) -> String {
    let value = |v: &Value| match v {
        Value::Int(i) => i.to_string(),
        Value::Text(s) => escape(s, true),
        Value::Stack(frames) => escape(&folded::stack(frames), true),
    };
    names.iter().zip(key).map(|(n, v)| format!("{n}=\"{}\"", value(v))).collect::<Vec<_>>().join(",")
}

/// `{labels,extra}`, or nothing when both are empty.
fn braces(labels: &str, extra: Option<String>) -> String {
    match (labels.is_empty(), extra) {
        (true, None) => String::new(),
        (true, Some(e)) => format!("{{{e}}}"),
        (false, None) => format!("{{{labels}}}"),
        (false, Some(e)) => format!("{{{labels},{e}}}"),
    }
}

/// Escapes of the exposition format (`\\`, `\n`, and `\"` in label values); other
/// control characters from traced programs become `?`.
pub(crate) fn escape(s: &str, quoted: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quoted => out.push_str("\\\""),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Cumulative buckets. A bucket holds the integers `low <= v < high`, so its inclusive
/// upper bound is `high - 1`; the overflow bucket counts only in `+Inf`.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut bounds: Vec<(i64, u64)> =
        h.buckets.iter().filter(|b| b.high != i64::MAX).map(|b| (b.high.saturating_sub(1), b.count)).collect();
    bounds.sort_by_key(|&(le, _)| le);
    let mut cumulative = 0u64;
    for (i, &(le, count)) in bounds.iter().enumerate() {
        cumulative = cumulative.saturating_add(count);
        if bounds.get(i + 1).is_some_and(|&(next, _)| next == le) {
            continue;
        }
        let _ = writeln!(out, "{name}_bucket{} {cumulative}", braces(labels, Some(format!("le=\"{le}\""))));
    }
    let total = h.buckets.iter().fold(0u64, |n, b| n.saturating_add(b.count));
    let _ = writeln!(out, "{name}_bucket{} {total}", braces(labels, Some("le=\"+Inf\"".to_string())));
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels, None), h.sum);
    let _ = writeln!(out, "{name}_count{} {total}", braces(labels, None));
}

fn summary(out: &mut String, name: &str, labels: &str, q: &Quantiles) {
    for p in &q.points {
        let quantile = format!("quantile=\"{}\"", quantile(p.millionths));
        let _ = writeln!(out, "{name}{} {}", braces(labels, Some(quantile)), p.value);
    }
    let _ = writeln!(out, "{name}_sum{} {}", braces(labels, None), q.sum);
    let _ = writeln!(out, "{name}_count{} {}", braces(labels, None), q.count);
}

/// Millionths as a decimal fraction: `0.5`, `0.999`, `1`.
fn quantile(millionths: u32) -> String {
    let (whole, frac) = (millionths / 1_000_000, millionths % 1_000_000);
    match frac {
        0 => whole.to_string(),
        _ => format!("{whole}.{}", format!("{frac:06}").trim_end_matches('0')),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::output::entries::sorted;
    use crate::output::testing::{agg, frame, hist, quantiles, scalar, stack, text};

    fn render(plugin: &str, aggs: &[Aggregation]) -> String {
        let sorted: Vec<_> = aggs.iter().map(|a| (a, sorted(a))).collect();
        let block = exposition(plugin, &sorted);
        if let Err(e) = check(&block) {
            panic!("{e}:\n{block}");
        }
        block
    }

    #[test]
    fn counts_are_counters_and_other_scalars_gauges() {
        let mut count = agg(
            "syscall",
            AggKind::Count,
            &["name"],
            vec![scalar(&[text("read")], 12), scalar(&[text("getppid")], 1000)],
        );
        count.title = "Syscalls by name\\count".to_string();
        let avg = agg("latency-avg", AggKind::Avg, &[], vec![scalar(&[], -5)]);
        let want = "\
# HELP wasmtap_syscount_syscall_total Syscalls by name\\\\count
# TYPE wasmtap_syscount_syscall_total counter
wasmtap_syscount_syscall_total{name=\"read\"} 12
wasmtap_syscount_syscall_total{name=\"getppid\"} 1000
# HELP wasmtap_syscount_latency_avg latency-avg
# TYPE wasmtap_syscount_latency_avg gauge
wasmtap_syscount_latency_avg -5
";
        assert_eq!(render("syscount", &[count, avg]), want);
    }

    #[test]
    fn histograms_are_cumulative_with_inclusive_integer_bounds() {
        let h = hist(&[(i64::MIN, 0, 1), (0, 1, 2), (1, 2, 0), (2, 4, 3), (100, i64::MAX, 4)], 321);
        let a = agg("lat", AggKind::Quantize, &["disk"], vec![AggEntry { key: vec![text("sda")], value: h }]);
        let want = "\
# HELP wasmtap_bio_lat lat
# TYPE wasmtap_bio_lat histogram
wasmtap_bio_lat_bucket{disk=\"sda\",le=\"-1\"} 1
wasmtap_bio_lat_bucket{disk=\"sda\",le=\"0\"} 3
wasmtap_bio_lat_bucket{disk=\"sda\",le=\"1\"} 3
wasmtap_bio_lat_bucket{disk=\"sda\",le=\"3\"} 6
wasmtap_bio_lat_bucket{disk=\"sda\",le=\"+Inf\"} 10
wasmtap_bio_lat_sum{disk=\"sda\"} 321
wasmtap_bio_lat_count{disk=\"sda\"} 10
";
        assert_eq!(render("bio", &[a]), want);
        let empty = agg("e", AggKind::Lquantize, &[], vec![AggEntry { key: vec![], value: hist(&[], 0) }]);
        let want = "\
# HELP wasmtap_bio_e e
# TYPE wasmtap_bio_e histogram
wasmtap_bio_e_bucket{le=\"+Inf\"} 0
wasmtap_bio_e_sum 0
wasmtap_bio_e_count 0
";
        assert_eq!(render("bio", &[empty]), want);
    }

    #[test]
    fn percentiles_are_summaries() {
        let a = agg(
            "rt",
            AggKind::Percentiles,
            &[],
            vec![AggEntry { key: vec![], value: quantiles(9, 90, &[(500_000, 7), (999_000, 30), (1_000_000, 31)]) }],
        );
        let want = "\
# HELP wasmtap_p_rt rt
# TYPE wasmtap_p_rt summary
wasmtap_p_rt{quantile=\"0.5\"} 7
wasmtap_p_rt{quantile=\"0.999\"} 30
wasmtap_p_rt{quantile=\"1\"} 31
wasmtap_p_rt_sum 90
wasmtap_p_rt_count 9
";
        assert_eq!(render("p", &[a]), want);
    }

    #[test]
    fn names_and_labels_are_made_valid_and_unique() {
        let key_names = ["comm", "comm", "1st", "__x", "le", "a-b", ""];
        let key: Vec<Value> = ["a\\b", "q\"", "n\nl", "t\tab", "ü", "-", ""].iter().map(|s| text(s)).collect();
        let h = agg("9 lives", AggKind::Quantize, &key_names, vec![AggEntry { key, value: hist(&[(0, 1, 1)], 0) }]);
        let clash =
            agg("9-lives", AggKind::Quantize, &[], vec![AggEntry { key: vec![], value: hist(&[(0, 1, 1)], 0) }]);
        let gauge = agg("9_lives_count", AggKind::Max, &[], vec![scalar(&[], 1)]);
        let counter = agg("events_total", AggKind::Count, &[], vec![scalar(&[], 1)]);
        let block = render("my-plugin", &[h, clash, gauge, counter]);
        let labels = r#"comm="a\\b",comm_2="q\"",key_1st="n\nl",key___x="t?ab",le_2="ü",a_b="-",key="""#;
        assert!(block.contains(&format!("wasmtap_my_plugin_9_lives_bucket{{{labels},le=\"0\"}} 1\n")), "{block}");
        assert!(block.contains("# TYPE wasmtap_my_plugin_9_lives_2 histogram\n"), "{block}");
        assert!(block.contains("# TYPE wasmtap_my_plugin_9_lives_count_2 gauge\n"), "{block}");
        assert!(block.contains("\nwasmtap_my_plugin_events_total 1\n"), "{block}");
    }

    #[test]
    fn stack_keys_are_folded_labels_merged() {
        let s = |off| stack(vec![frame("f", off), frame("main", 0)]);
        let a = agg("cpu", AggKind::Count, &["stack"], vec![scalar(&[s(1)], 2), scalar(&[s(2)], 3)]);
        assert!(render("prof", &[a]).ends_with("wasmtap_prof_cpu_total{stack=\"main;f\"} 5\n"));
    }

    #[test]
    fn values_of_another_kind_are_left_out() {
        let a = agg("x", AggKind::Count, &["k"], vec![AggEntry { key: vec![text("h")], value: hist(&[(0, 1, 1)], 0) }]);
        assert_eq!(render("p", &[a]), "# HELP wasmtap_p_x_total x\n# TYPE wasmtap_p_x_total counter\n");
    }

    #[test]
    fn promtool_accepts_the_exposition() {
        let Ok(out) = std::process::Command::new("promtool").arg("--version").output() else {
            eprintln!("promtool is not installed: only the structural check ran");
            return;
        };
        assert!(out.status.success());
        let aggs = [
            agg("syscall", AggKind::Count, &["name"], vec![scalar(&[text("read")], 12)]),
            agg("bytes", AggKind::Sum, &["comm", "fd"], vec![scalar(&[text("sh \"x\""), Value::Int(3)], 40)]),
            agg(
                "lat",
                AggKind::Quantize,
                &["disk"],
                vec![AggEntry {
                    key: vec![text("sda")],
                    value: hist(&[(i64::MIN, 0, 1), (0, 1, 2), (2, 4, 3), (8, i64::MAX, 4)], 99),
                }],
            ),
            agg(
                "rt",
                AggKind::Percentiles,
                &["le"],
                vec![AggEntry { key: vec![text("x")], value: quantiles(9, 90, &[(500_000, 7), (990_000, 30)]) }],
            ),
            agg("cpu", AggKind::Count, &["stack"], vec![scalar(&[stack(vec![frame("f", 1), frame("main;x", 0)])], 2)]),
        ];
        let block = render("my-plugin", &aggs);
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), block.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && said.trim().is_empty(), "promtool: {said}\n{block}");
    }

    /// What a scraper checks: valid names, a TYPE before each family's samples, families
    /// not interleaved, no sample twice, cumulative histograms ending in `+Inf` = `_count`.
    fn check(block: &str) -> Result<(), String> {
        let mut types: HashMap<String, String> = HashMap::new();
        let mut done: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        let mut seen: HashSet<String> = HashSet::new();
        let mut buckets: BTreeMap<(String, String), Vec<(f64, f64)>> = BTreeMap::new();
        let mut counts: HashMap<(String, String), f64> = HashMap::new();
        for line in block.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let (what, rest) = rest.split_once(' ').ok_or("bare comment")?;
                let (name, arg) = rest.split_once(' ').unwrap_or((rest, ""));
                valid_metric(name)?;
                if what == "TYPE" {
                    if types.insert(name.to_string(), arg.to_string()).is_some() || done.contains(name) {
                        return Err(format!("second TYPE for {name}"));
                    }
                    if arg == "counter" && !name.ends_with("_total") {
                        return Err(format!("counter {name} without _total"));
                    }
                }
                if let Some(prev) = current.replace(name.to_string()) {
                    if prev != name {
                        done.insert(prev);
                    }
                }
                continue;
            }
            let (series, value) = line.rsplit_once(' ').ok_or("no value")?;
            let value: f64 = value.parse().map_err(|_| format!("bad value in {line}"))?;
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.strip_suffix('}').ok_or("unclosed labels")?),
                None => (series, ""),
            };
            valid_metric(name)?;
            let family = family_of(&types, name).ok_or(format!("no TYPE for {name}"))?;
            if current.as_deref() != Some(family.as_str()) {
                return Err(format!("{name} outside its family"));
            }
            let pairs = parse_labels(labels)?;
            if !seen.insert(format!("{name}{{{pairs:?}}}")) {
                return Err(format!("duplicate sample {line}"));
            }
            let others: Vec<_> = pairs.iter().filter(|(k, _)| k != "le").cloned().collect();
            let id = (family.clone(), format!("{others:?}"));
            if name.ends_with("_bucket") {
                let le = pairs.iter().find(|(k, _)| k == "le").ok_or("bucket without le")?;
                let le: f64 = le.1.parse().map_err(|_| "bad le")?;
                buckets.entry(id).or_default().push((le, value));
            } else if name.ends_with("_count") && types[&family] == "histogram" {
                counts.insert(id, value);
            }
        }
        for (id, b) in &buckets {
            if b.windows(2).any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1) {
                return Err(format!("{id:?}: buckets not cumulative: {b:?}"));
            }
            if b.last().map(|l| l.0) != Some(f64::INFINITY) || counts.get(id) != b.last().map(|l| &l.1) {
                return Err(format!("{id:?}: +Inf bucket and _count disagree"));
            }
        }
        Ok(())
    }

    fn valid_metric(name: &str) -> Result<(), String> {
        let ok = name
            .chars()
            .enumerate()
            .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()));
        if ok && !name.is_empty() {
            Ok(())
        } else {
            Err(format!("bad metric name {name:?}"))
        }
    }

    fn family_of(types: &HashMap<String, String>, name: &str) -> Option<String> {
        if types.contains_key(name) {
            return Some(name.to_string());
        }
        ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| types.contains_key(*f))
            .map(str::to_string)
    }

    fn parse_labels(mut s: &str) -> Result<Vec<(String, String)>, String> {
        let mut pairs = Vec::new();
        while !s.is_empty() {
            let (name, rest) = s.split_once("=\"").ok_or(format!("bad label in {s}"))?;
            let ok = name
                .chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit()));
            if !ok || name.is_empty() || name.starts_with("__") || pairs.iter().any(|(n, _)| n == name) {
                return Err(format!("bad or repeated label name {name:?}"));
            }
            let (mut value, mut chars) = (String::new(), rest.char_indices());
            let end = loop {
                match chars.next().ok_or("unterminated label value")? {
                    (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => return Err(format!("bad escape \\{c}")),
                    },
                    (i, '"') => break i,
                    (_, c) if c.is_control() => return Err("raw control character".into()),
                    (_, c) => value.push(c),
                }
            };
            pairs.push((name.to_string(), value));
            s = &rest[end + 1..];
            s = s.strip_prefix(',').unwrap_or(s);
        }
        Ok(pairs)
    }
}
