//! biosnoop: which block I/O requests are being made, by whom, where, and how long
//! does each take?
//!
//! The wasmtap take on bpftrace's `tools/biosnoop.bt` and BCC's `biosnoop`: a row per
//! completed request, with the process that issued it, the disk, the operation, the
//! sector, the size and the latency from issue (`block:block_rq_issue`) to completion
//! (`block:block_rq_complete`). See README.md.

use wasmtap_sdk::{
    export_plugin, BoundedMap, Column, ColumnKind, Event, LazyField, Level, Output, ParamKind, ParamSpec, Params, Plan,
    Plugin, PluginInfo, Subscription, TableSpec, Value,
};

const ISSUE: &str = "tracepoint:block:block_rq_issue";
const COMPLETE: &str = "tracepoint:block:block_rq_complete";

/// A request issued and not yet completed.
struct Pending {
    ts: u64,
    pid: u32,
    comm: String,
    op: String,
    bytes: u64,
}

/// The fields read, each resolved once per subscription.
struct Fields {
    dev: LazyField,
    sector: LazyField,
    bytes: LazyField,
    nr_sector: LazyField,
    rwbs: LazyField,
    error: LazyField,
}

struct Biosnoop {
    /// Only this disk (`MAJOR:MINOR`), if given.
    disk: Option<u64>,
    /// Only requests that took at least this long.
    min_ns: u64,
    pending: BoundedMap<(u64, u64), Pending>,
    fields: Fields,
}

impl Plugin for Biosnoop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "biosnoop",
            env!("CARGO_PKG_VERSION"),
            "Which block I/O requests are made, by whom, where, how big, and how long does each take?",
            vec![
                ParamSpec::new(
                    "disk",
                    ParamKind::Text,
                    "",
                    "only this disk, as MAJOR:MINOR (7:0); default: every disk",
                ),
                ParamSpec::new("min", ParamKind::Duration, "0", "only requests that took at least this long (10ms)"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let disk = match params.text("disk") {
            "" => None,
            text => Some(parse_disk(text).ok_or_else(|| format!("disk: `{text}` is not MAJOR:MINOR (such as 7:0)"))?),
        };
        let mut issue = Subscription::new(ISSUE);
        let mut complete = Subscription::new(COMPLETE);
        if let Some(dev) = disk {
            issue = issue.when("dev", wasmtap_sdk::CmpOp::Eq, dev as i64);
            complete = complete.when("dev", wasmtap_sdk::CmpOp::Eq, dev as i64);
        }
        let columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("COMM", ColumnKind::Text, 16),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("DISK", ColumnKind::Text, 7),
            Column::new("T", ColumnKind::Text, 4),
            Column::new("SECTOR", ColumnKind::Integer, 10),
            Column::new("BYTES", ColumnKind::Integer, 8),
            Column::new("LAT_US", ColumnKind::Integer, 8),
            Column::new("ERR", ColumnKind::Integer, 3),
        ];
        let plan = Plan::new(vec![issue, complete]).with_table(TableSpec::new("requests", columns));
        let fields = Fields {
            dev: LazyField::new("dev"),
            sector: LazyField::new("sector"),
            bytes: LazyField::new("bytes"),
            nr_sector: LazyField::new("nr_sector"),
            rwbs: LazyField::new("rwbs"),
            error: LazyField::new("error"),
        };
        let me = Biosnoop { disk, min_ns: params.duration_ns("min"), pending: BoundedMap::new(), fields };
        Ok((me, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let Event::Tracepoint(tp) = ev else { return };
        let f = &mut self.fields;
        let (Some(dev), Some(sector)) =
            (f.dev.get(tp).and_then(|v| v.as_u64()), f.sector.get(tp).and_then(|v| v.as_u64()))
        else {
            return;
        };
        if self.disk.is_some_and(|d| d != dev) {
            return;
        }
        if ev.sub() == 0 {
            let op = f.rwbs.get(tp).and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            let bytes = f.bytes.get(tp).and_then(|v| v.as_u64()).unwrap_or(0);
            let pending = Pending { ts: ev.ts_ns(), pid: ev.pid(), comm: ev.comm().into_owned(), op, bytes };
            self.pending.insert((dev, sector), pending);
            return;
        }
        // A completion of a request issued before the run began has no start: no row.
        let Some(p) = self.pending.remove(&(dev, sector)) else { return };
        let latency = ev.ts_ns().saturating_sub(p.ts);
        if latency < self.min_ns {
            return;
        }
        let bytes = if p.bytes > 0 { p.bytes } else { f.nr_sector.get(tp).and_then(|v| v.as_u64()).unwrap_or(0) * 512 };
        let error = f.error.get(tp).and_then(|v| v.as_i64()).unwrap_or(0);
        out.row(
            0,
            vec![
                Value::from(ev.ts_ns()),
                Value::Text(p.comm),
                Value::from(p.pid),
                Value::Text(disk_name(dev)),
                Value::Text(p.op),
                Value::Int(sector as i64),
                Value::Int(bytes as i64),
                Value::Int((latency / 1000) as i64),
                Value::Int(error),
            ],
        );
    }

    fn finish(&mut self, _out: &mut Output) -> Vec<wasmtap_sdk::Aggregation> {
        if self.pending.dropped() > 0 {
            let msg = format!(
                "{} requests were not followed: more than {} were in flight at once",
                self.pending.dropped(),
                self.pending.max()
            );
            wasmtap_sdk::log(Level::Warn, &msg);
        }
        Vec::new()
    }
}

/// A kernel `dev_t` (major in the bits above 20) as `MAJOR:MINOR`.
fn disk_name(dev: u64) -> String {
    format!("{}:{}", dev >> 20, dev & ((1 << 20) - 1))
}

/// `MAJOR:MINOR` as a kernel `dev_t`.
fn parse_disk(text: &str) -> Option<u64> {
    let (major, minor) = text.trim().split_once(':')?;
    let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
    (major < 1 << 12 && minor < 1 << 20).then_some(major << 20 | minor)
}

export_plugin!(Biosnoop);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disks_are_major_minor_both_ways() {
        assert_eq!(parse_disk("7:0"), Some(7 << 20));
        assert_eq!(parse_disk("259:3").map(disk_name).as_deref(), Some("259:3"));
        assert_eq!(parse_disk("sda"), None);
        assert_eq!(parse_disk("7:x"), None);
        assert_eq!(parse_disk("4096:0"), None);
        let e = Biosnoop::start(&Params::from_pairs(&[("disk", "sda"), ("min", "0")])).err().unwrap();
        assert_eq!(e, "disk: `sda` is not MAJOR:MINOR (such as 7:0)");
    }

    #[test]
    fn a_disk_is_filtered_in_the_kernel() {
        let (_, plan) = Biosnoop::start(&Params::from_pairs(&[("disk", "7:2"), ("min", "0")])).unwrap();
        assert_eq!(plan.subscriptions.len(), 2);
        for sub in &plan.subscriptions {
            assert_eq!(sub.filter.predicates[0].field, "dev");
            assert_eq!(sub.filter.predicates[0].value, 7 << 20 | 2);
        }
    }
}
