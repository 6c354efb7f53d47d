//! opentrace: every open as one line, the way the DTrace/SystemTap book's Exercise 1
//! prints it: `comm[pid(uid:gid)] openat("path", FLAGS) = ret`. See README.md.

use std::fmt::Write;

use wasmtap_sdk::syscalls::{format_ret, open_flags};
use wasmtap_sdk::{export_plugin, Event, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo, Subscription};

struct Opentrace {
    path: String,
    failed: bool,
    full: bool,
    line: String,
}

impl Plugin for Opentrace {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "opentrace",
            env!("CARGO_PKG_VERSION"),
            "Every open as one line: who, which path, which flags, what came back",
            vec![
                ParamSpec::new("path", ParamKind::Text, "", "only paths containing this, e.g. /etc"),
                ParamSpec::new("failed", ParamKind::Boolean, "false", "only opens that failed"),
                ParamSpec::new("full", ParamKind::Boolean, "false", "print relative paths made absolute"),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let me = Opentrace {
            path: params.text("path").into(),
            failed: params.bool("failed"),
            full: params.bool("full"),
            line: String::new(),
        };
        Ok((me, Plan::new(vec![Subscription::new("file:open")])))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        let Event::Open(open) = ev else { return };
        if self.failed && open.ret() >= 0 {
            return;
        }
        let path = if self.full { open.full_path().into() } else { open.path() };
        if !path.contains(self.path.as_str()) {
            return;
        }
        self.line.clear();
        let call = open.syscall().name().unwrap_or("open");
        let _ = writeln!(
            self.line,
            "{}[{}({}:{})] {call}(\"{}\", {}) = {}",
            ev.comm(),
            ev.pid(),
            ev.uid(),
            ev.gid(),
            path.escape_debug(),
            open_flags(open.flags()),
            format_ret(open.ret())
        );
        out.print(&self.line);
    }
}

export_plugin!(Opentrace);

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtap_sdk::{test_records as t, Record};

    fn lines(params: &[(&str, &str)], records: &[Vec<u8>]) -> String {
        let (mut me, _) = Opentrace::start(&Params::from_pairs(params)).unwrap();
        let mut out = Output::new();
        for r in records {
            me.on_event(&Event::new(Record::new(r)).unwrap(), &mut out);
        }
        out.text()
    }

    #[test]
    fn one_line_per_open_in_the_books_format() {
        let recs = [t::open(939, 257, b"/tmp/test", 0o2101, 3, &[]), t::open(940, 2, b"missing", 0, -2, &[b"etc"])];
        let p = [("path", ""), ("failed", "false"), ("full", "false")];
        assert_eq!(
            lines(&p, &recs),
            "cat[939(1000:100)] openat(\"/tmp/test\", O_WRONLY|O_CREAT|O_APPEND) = 3\n\
             cat[940(1000:100)] open(\"missing\", O_RDONLY) = -2 ENOENT\n"
        );
        let p = [("path", "/etc"), ("failed", "false"), ("full", "true")];
        assert_eq!(lines(&p, &recs), "cat[940(1000:100)] open(\"/etc/missing\", O_RDONLY) = -2 ENOENT\n");
        let p = [("path", ""), ("failed", "true"), ("full", "false")];
        assert_eq!(lines(&p, &recs).lines().count(), 1);
    }
}
