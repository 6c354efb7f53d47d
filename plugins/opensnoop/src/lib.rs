//! opensnoop: which files are being opened, by whom, and what comes back?
//!
//! The wasmtap take on bpftrace's `tools/opensnoop.bt` and libbpf-tools' `opensnoop`:
//! one row per completed open, openat, openat2 or creat (`file:open`: one event per
//! call, emitted at its return with the path the kernel read), flags decoded, relative
//! paths made absolute. See README.md.

use wasmtap_sdk::syscalls::{errno_name, open_flags, parse_open_flags};
use wasmtap_sdk::{
    export_plugin, Column, ColumnKind, Event, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
    Subscription, TableSpec, Value,
};

/// What a user can narrow the rows to.
#[derive(Debug, Default)]
struct Only {
    failed: bool,
    name: Vec<u8>,
    path: String,
    /// Flags that must be set, and the access mode if one was named.
    flags: u64,
    mode: Option<u64>,
}

struct Opensnoop {
    only: Only,
    full: bool,
    latency: bool,
}

impl Plugin for Opensnoop {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "opensnoop",
            env!("CARGO_PKG_VERSION"),
            "Which files are being opened, by whom, with which flags, and what comes back?",
            vec![
                ParamSpec::new("failed", ParamKind::Boolean, "false", "only opens that failed"),
                ParamSpec::new("name", ParamKind::Text, "", "only processes whose command name contains this"),
                ParamSpec::new("path", ParamKind::Text, "", "only paths containing this (after making them absolute)"),
                ParamSpec::new(
                    "flags",
                    ParamKind::Text,
                    "",
                    "only opens with all of these flags, e.g. O_CREAT|O_APPEND (O_RDONLY, O_WRONLY, O_RDWR match the access mode)",
                ),
                ParamSpec::new("full", ParamKind::Boolean, "true", "show relative paths made absolute; false: as passed"),
                ParamSpec::new("latency", ParamKind::Boolean, "false", "add the time each open took (LAT_US)"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let text = params.text("flags");
        let mut flags = 0;
        let mut mode = None;
        for token in text.split(['|', ',']).map(str::trim).filter(|t| !t.is_empty()) {
            let bits = parse_open_flags(token).map_err(|e| format!("flags: {e}"))?;
            let upper = token.to_ascii_uppercase();
            if ["O_RDONLY", "RDONLY", "O_WRONLY", "WRONLY", "O_RDWR", "RDWR"].contains(&upper.as_str()) {
                if mode.is_some_and(|m| m != bits) {
                    return Err(format!("flags: `{text}` names two access modes"));
                }
                mode = Some(bits);
            } else {
                flags |= bits;
            }
        }
        let only = Only {
            failed: params.bool("failed"),
            name: params.text("name").into(),
            path: params.text("path").into(),
            flags,
            mode,
        };
        let latency = params.bool("latency");
        let mut columns = vec![
            Column::new("TIME", ColumnKind::Timestamp, 12),
            Column::new("PID", ColumnKind::Integer, 7),
            Column::new("COMM", ColumnKind::Text, 16),
            Column::new("FD", ColumnKind::Integer, 3),
            Column::new("ERR", ColumnKind::Text, 7),
        ];
        if latency {
            columns.push(Column::new("LAT_US", ColumnKind::Integer, 7));
        }
        columns.push(Column::new("FLAGS", ColumnKind::Text, 26));
        columns.push(Column::new("PATH", ColumnKind::Text, 0));
        let plan = Plan::new(vec![Subscription::new("file:open")]).with_table(TableSpec::new("opens", columns));
        Ok((Opensnoop { only, full: params.bool("full"), latency }, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let Event::Open(open) = ev else { return };
        let ret = open.ret();
        if self.only.failed && ret >= 0 {
            return;
        }
        if !ev.comm_contains(&self.only.name) || !has_flags(open.flags(), self.only.flags, self.only.mode) {
            return;
        }
        let path = if self.full { open.full_path() } else { open.path().into_owned() };
        if !path.contains(self.only.path.as_str()) {
            return;
        }
        let (fd, err) = if ret >= 0 { (ret, "-") } else { (-1, errno_name(ret).unwrap_or("?")) };
        let mut row = Vec::with_capacity(8);
        row.push(Value::from(ev.ts_ns()));
        row.push(Value::from(ev.pid()));
        row.push(Value::Text(ev.comm().into_owned()));
        row.push(Value::Int(fd));
        row.push(Value::Text(if err == "?" { ret.to_string() } else { err.to_string() }));
        if self.latency {
            row.push(Value::from(open.latency_ns() / 1000));
        }
        row.push(Value::Text(open_flags(open.flags())));
        row.push(Value::Text(path));
        out.row(0, row);
    }
}

/// `flags` has every flag of `wanted`, and the access mode `mode` if one is given.
fn has_flags(flags: u64, wanted: u64, mode: Option<u64>) -> bool {
    flags & wanted == wanted && mode.is_none_or(|m| flags & wasmtap_sdk::syscalls::o::ACCMODE == m)
}

export_plugin!(Opensnoop);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::{test_records as t, Record};

    fn rows(params: &[(&str, &str)], records: &[Vec<u8>]) -> Vec<Vec<Value>> {
        let (mut me, plan) = Opensnoop::start(&Params::from_pairs(params)).unwrap();
        assert_eq!(plan.subscriptions[0].probe, "file:open");
        let mut out = Output::new();
        for r in records {
            me.on_event(&Event::new(Record::new(r)).unwrap(), &mut out);
        }
        out.rows().map(|r| r.values.clone()).collect()
    }

    fn defaults() -> Vec<(&'static str, &'static str)> {
        vec![("failed", "false"), ("name", ""), ("path", ""), ("flags", ""), ("full", "true"), ("latency", "false")]
    }

    #[test]
    fn a_row_per_open_with_flags_decoded_and_the_path_made_absolute() {
        let recs = [
            t::open(7, 257, b"/etc/hostname", 0o2000000, 3, &[]),
            t::open(7, 2, b"notes.txt", 0o2101, -13, &[b"src", b"home"]),
        ];
        let got = rows(&defaults(), &recs);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0][3..],
            [
                Value::Int(3),
                Value::Text("-".into()),
                Value::Text("O_RDONLY|O_CLOEXEC".into()),
                Value::Text("/etc/hostname".into())
            ]
        );
        assert_eq!(
            got[1][3..],
            [
                Value::Int(-1),
                Value::Text("EACCES".into()),
                Value::Text("O_WRONLY|O_CREAT|O_APPEND".into()),
                Value::Text("/home/src/notes.txt".into())
            ]
        );
    }

    #[test]
    fn filters_narrow_the_rows() {
        let recs = [
            t::open(7, 257, b"/etc/hostname", 0, 3, &[]),
            t::open(7, 257, b"/tmp/x", 0o101, -2, &[]),
            t::open(7, 257, b"/tmp/y", 0o1101, 4, &[]),
        ];
        let with = |k: &'static str, v: &'static str| {
            let mut p = defaults();
            p.retain(|(n, _)| *n != k);
            p.push((k, v));
            rows(&p, &recs).len()
        };
        assert_eq!(with("failed", "true"), 1);
        assert_eq!(with("path", "/tmp"), 2);
        assert_eq!(with("flags", "O_CREAT"), 2);
        assert_eq!(with("flags", "O_WRONLY|O_TRUNC"), 1);
        assert_eq!(with("flags", "O_RDONLY"), 1);
        assert_eq!(with("name", "cat"), 3);
        assert_eq!(with("name", "dog"), 0);
        let mut p = defaults();
        p.push(("latency", "true"));
        p.remove(5);
        assert_eq!(rows(&p, &recs)[0][5], Value::Int(1)); // 1500 ns
    }

    #[test]
    fn bad_flags_are_refused_by_name() {
        let mut p = defaults();
        p[3] = ("flags", "O_CREAT|O_BOGUS");
        let err = Opensnoop::start(&Params::from_pairs(&p)).err().unwrap();
        assert!(err.starts_with("flags: `O_BOGUS`"), "{err}");
        p[3] = ("flags", "O_RDONLY|O_WRONLY");
        let err = Opensnoop::start(&Params::from_pairs(&p)).err().unwrap();
        assert!(err.contains("two access modes"), "{err}");
    }
}
