//! `--memory-mib`, `--deadline`, `--cpu-budget`...: every sandbox limit as a flag whose
//! value sets the default for all plugins, or, as `PLUGIN=VALUE`, one plugin's.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::limits::{Limits, OnFault};

/// Limits of the plugins' sandboxes.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Sandbox limits (VALUE for every plugin, or PLUGIN=VALUE for one; repeatable)")]
pub struct LimitArgs {
    /// Linear memory per plugin, in MiB; growing past it is a fault.
    #[arg(long, value_name = "[PLUGIN=]MIB", default_value = "64")]
    memory_mib: Vec<String>,
    /// Longest one call into a plugin may run before it is stopped (a fault).
    #[arg(long, value_name = "[PLUGIN=]DURATION", default_value = "250ms")]
    deadline: Vec<String>,
    /// CPU a plugin may use per second, in percent of one CPU. Over it, its events are
    /// dropped (and counted) until the next second; 3 seconds in a row disable it.
    #[arg(long, value_name = "[PLUGIN=]PERCENT", default_value = "50")]
    cpu_budget: Vec<String>,
    /// Output (rows, text, logs) a plugin may produce per second, in KiB. Past it, its
    /// output and events are dropped (and counted) until the next second; 3 seconds in
    /// a row disable it.
    #[arg(long, value_name = "[PLUGIN=]KIB", default_value = "16384")]
    output_budget: Vec<String>,
    /// Aggregation entries a plugin may report in one call; more is a fault.
    #[arg(long, value_name = "[PLUGIN=]N", default_value = "1000000")]
    max_state: Vec<String>,
    /// Core instances, tables and memories a plugin may create, each [default: 16, or
    /// what the plugin's manifest asks for, up to 64 (a Python plugin: 38)].
    #[arg(long, value_name = "[PLUGIN=]N")]
    max_instances: Vec<String>,
    /// What a fault (trap, panic, memory, deadline) does: `disable` the plugin, or
    /// `restart` it from its compiled form after a backoff (50 ms, doubling to 5 s).
    #[arg(long, value_name = "[PLUGIN=]disable|restart", default_value = "disable")]
    on_fault: Vec<String>,
    /// Restarts in a row that fault before completing a single call, after which a
    /// restarting plugin is disabled (a crash loop).
    #[arg(long, value_name = "[PLUGIN=]N", default_value = "5")]
    crash_loop: Vec<String>,
}

/// One limit set by a flag.
#[derive(Clone, Debug)]
enum Setting {
    Memory(usize),
    Deadline(Duration),
    Cpu(u64),
    Output(u64),
    State(usize),
    Instances(usize),
    OnFault(OnFault),
    CrashLoop(u32),
}

impl Setting {
    fn apply(&self, l: &mut Limits) {
        match *self {
            Setting::Memory(v) => l.memory_bytes = v,
            Setting::Deadline(v) => l.deadline = v,
            Setting::Cpu(v) => l.cpu_ms_per_sec = v,
            Setting::Output(v) => l.output_bytes_per_sec = v,
            Setting::State(v) => l.state_entries = v,
            Setting::Instances(v) => {
                l.instances = v;
                l.instances_set = true;
            }
            Setting::OnFault(v) => l.on_fault = v,
            Setting::CrashLoop(v) => l.crash_loop = v,
        }
    }
}

/// The limits of a run: defaults, and per-plugin overrides.
#[derive(Clone, Debug, Default)]
pub struct LimitSet {
    all: Vec<(String, Setting)>,
    one: BTreeMap<String, Vec<(String, Setting)>>,
}

/// A limit flag: its name, its raw values, and how one value parses.
type Flag<'a> = (&'a str, &'a Vec<String>, fn(&str) -> Option<Setting>);

impl LimitArgs {
    /// Parse every value; errors name the flag and the value.
    pub fn parse(&self) -> anyhow::Result<LimitSet> {
        let mut set = LimitSet::default();
        let flags: [Flag<'_>; 8] = [
            ("--memory-mib", &self.memory_mib, |v| {
                v.parse::<usize>().ok().filter(|m| (1..=4096).contains(m)).map(|m| Setting::Memory(m << 20))
            }),
            ("--deadline", &self.deadline, |v| {
                crate::plugin::params::parse_duration(v)
                    .filter(|d| *d >= Duration::from_millis(1) && *d <= Duration::from_secs(60))
                    .map(Setting::Deadline)
            }),
            ("--cpu-budget", &self.cpu_budget, |v| {
                let pct = v.strip_suffix('%').unwrap_or(v).parse::<u64>().ok().filter(|p| (1..=100).contains(p))?;
                Some(Setting::Cpu(pct * 10))
            }),
            ("--output-budget", &self.output_budget, |v| {
                v.parse::<u64>().ok().filter(|k| (1..=1 << 22).contains(k)).map(|k| Setting::Output(k << 10))
            }),
            ("--max-state", &self.max_state, |v| {
                v.parse::<usize>().ok().filter(|n| (1..=100_000_000).contains(n)).map(Setting::State)
            }),
            ("--max-instances", &self.max_instances, |v| {
                v.parse::<usize>().ok().filter(|n| (1..=1000).contains(n)).map(Setting::Instances)
            }),
            ("--on-fault", &self.on_fault, |v| match v {
                "disable" => Some(Setting::OnFault(OnFault::Disable)),
                "restart" => Some(Setting::OnFault(OnFault::Restart)),
                _ => None,
            }),
            ("--crash-loop", &self.crash_loop, |v| {
                v.parse::<u32>().ok().filter(|n| *n <= 1000).map(Setting::CrashLoop)
            }),
        ];
        for (flag, values, parse) in flags {
            for raw in values {
                let (plugin, value) = match raw.split_once('=') {
                    Some((p, v)) => (Some(p), v),
                    None => (None, raw.as_str()),
                };
                let setting = parse(value.trim())
                    .with_context(|| format!("bad value `{value}` for {flag}: {}", expected(flag)))?;
                match plugin {
                    Some(p) => set.one.entry(p.to_string()).or_default().push((flag.to_string(), setting)),
                    None => set.all.push((flag.to_string(), setting)),
                }
            }
        }
        Ok(set)
    }
}

/// `--max-kernel-cpu`: the share of one CPU the collectors may use, in percent; `None`
/// for 0, which turns the overload guard off.
pub fn parse_kernel_cpu(v: &str) -> anyhow::Result<Option<u32>> {
    let v = v.trim();
    match v.strip_suffix('%').unwrap_or(v).parse::<u32>() {
        Ok(0) => Ok(None),
        Ok(pct) if pct <= 10_000 => Ok(Some(pct)),
        _ => {
            bail!("bad value `{v}` for --max-kernel-cpu: expected a percentage of one CPU from 1 to 10000, or 0 (off)")
        }
    }
}

/// `--watchdog`: how long the run may make no progress; `None` for 0, which turns the
/// watchdog off. At least a second, since one plugin call may take up to 60 s
/// (`--deadline`) only when the user asks for it.
pub fn parse_watchdog(v: &str) -> anyhow::Result<Option<Duration>> {
    let v = v.trim();
    if v == "0" {
        return Ok(None);
    }
    crate::plugin::params::parse_duration(v)
        .filter(|d| *d >= Duration::from_secs(1) && *d <= Duration::from_secs(24 * 3600))
        .map(Some)
        .with_context(|| format!("bad value `{v}` for --watchdog: expected a duration from 1s to 24h, or 0 (off)"))
}

fn expected(flag: &str) -> &'static str {
    match flag {
        "--memory-mib" => "expected MiB from 1 to 4096",
        "--deadline" => "expected a duration from 1ms to 60s",
        "--cpu-budget" => "expected a percentage of one CPU from 1 to 100",
        "--output-budget" => "expected KiB per second from 1 to 4194304",
        "--max-state" => "expected a count from 1 to 100000000",
        "--max-instances" => "expected a count from 1 to 1000",
        "--on-fault" => "expected `disable` or `restart`",
        _ => "expected a count from 0 to 1000",
    }
}

impl LimitSet {
    /// The limits every plugin starts from.
    pub fn defaults(&self) -> Limits {
        let mut l = Limits::default();
        for (_, s) in &self.all {
            s.apply(&mut l);
        }
        l
    }

    /// The limits of the plugin called `name`.
    pub fn of(&self, name: &str) -> Limits {
        let mut l = self.defaults();
        for (_, s) in self.one.get(name).into_iter().flatten() {
            s.apply(&mut l);
        }
        l
    }

    /// True when some flag sets limits of the plugin `name` alone.
    pub fn overrides(&self, name: &str) -> bool {
        self.one.contains_key(name)
    }

    /// Every `PLUGIN=` must name a plugin of the run.
    pub fn check_names(&self, plugins: &[String]) -> anyhow::Result<()> {
        for (name, settings) in &self.one {
            if !plugins.contains(name) {
                let flag = settings.first().map_or("a limit", |(f, _)| f.as_str());
                bail!("{flag} names plugin `{name}`, which is not in this run (plugins: {})", plugins.join(", "));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitArgs,
    }

    fn parse(args: &[&str]) -> anyhow::Result<LimitSet> {
        Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied())).unwrap().limits.parse()
    }

    #[test]
    fn defaults_match_the_help() {
        let set = parse(&[]).unwrap();
        let l = set.of("anything");
        let d = Limits::default();
        assert_eq!((l.memory_bytes, l.deadline, l.cpu_ms_per_sec), (d.memory_bytes, d.deadline, d.cpu_ms_per_sec));
        assert_eq!((l.output_bytes_per_sec, l.state_entries, l.instances), (16 << 20, 1_000_000, 16));
        assert_eq!((l.on_fault, l.crash_loop), (OnFault::Disable, 5));
    }

    #[test]
    fn a_plugin_override_changes_only_that_plugin() {
        let set = parse(&["--deadline", "100ms", "--deadline", "spin=20ms", "--on-fault", "flaky=restart"]).unwrap();
        assert_eq!(set.of("spin").deadline, Duration::from_millis(20));
        assert_eq!(set.of("syscount").deadline, Duration::from_millis(100));
        assert_eq!(set.of("flaky").on_fault, OnFault::Restart);
        assert_eq!(set.of("spin").on_fault, OnFault::Disable);
        assert!(set.check_names(&["spin".into(), "flaky".into()]).is_ok());
        let err = set.check_names(&["spin".into()]).unwrap_err().to_string();
        assert!(err.contains("--on-fault names plugin `flaky`, which is not in this run"), "{err}");
    }

    #[test]
    fn run_guards_parse_and_zero_turns_them_off() {
        assert_eq!(parse_kernel_cpu("50").unwrap(), Some(50));
        assert_eq!(parse_kernel_cpu("1%").unwrap(), Some(1));
        assert_eq!(parse_kernel_cpu("0").unwrap(), None);
        let err = parse_kernel_cpu("10001").unwrap_err().to_string();
        assert_eq!(
            err,
            "bad value `10001` for --max-kernel-cpu: expected a percentage of one CPU from 1 to 10000, or 0 (off)"
        );
        assert_eq!(parse_watchdog("10m").unwrap(), Some(Duration::from_secs(600)));
        assert_eq!(parse_watchdog("2s").unwrap(), Some(Duration::from_secs(2)));
        assert_eq!(parse_watchdog("0").unwrap(), None);
        let err = parse_watchdog("500ms").unwrap_err().to_string();
        assert_eq!(err, "bad value `500ms` for --watchdog: expected a duration from 1s to 24h, or 0 (off)");
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = parse(&["--cpu-budget", "150"]).unwrap_err().to_string();
        assert_eq!(err, "bad value `150` for --cpu-budget: expected a percentage of one CPU from 1 to 100");
        let err = parse(&["--on-fault", "x=retry"]).unwrap_err().to_string();
        assert!(err.contains("bad value `retry` for --on-fault: expected `disable` or `restart`"), "{err}");
        assert_eq!(parse(&["--cpu-budget", "25%"]).unwrap().defaults().cpu_ms_per_sec, 250);
    }
}
