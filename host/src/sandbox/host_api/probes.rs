//! `wasmtap:plugin/probes`: the layout of a subscription's records.

use super::*;
use crate::wit::probes;

/// `probes.expand` calls a plugin's `start` may make.
pub const EXPAND_CALLS: u32 = 64;
/// Names one `probes.expand` answers at most: a run attaches at most 1,024 tracepoints.
pub const EXPAND_NAMES: usize = 1024;
/// Bytes of a pattern.
const PATTERN_BYTES: usize = 256;
/// `probes.describe` calls a plugin's `start` may make: as many as a run has tracepoints.
pub const DESCRIBE_CALLS: u32 = 1024;
/// What describing a uprobe or USDT probe costs of [`DESCRIBE_CALLS`]: its binary is read.
pub const USER_DESCRIBE_COST: u32 = 16;
/// `probes.user-strings` calls a plugin's `start` may make.
pub const STRINGS_CALLS: u32 = 64;
/// Bytes of a probe or field name in a `probes.user-strings` call.
const STRINGS_NAME_BYTES: usize = 256;

impl probes::Host for StoreState {
    fn schema(&mut self, sub: u32) -> wasmtime::Result<Option<types::ProbeSchema>> {
        Ok(self.host.schemas.get(sub as usize).cloned().flatten())
    }

    fn expand(&mut self, pattern: String) -> wasmtime::Result<Result<Vec<String>, String>> {
        if self.host.expand_calls == 0 {
            return Ok(Err(format!(
                "`{}`: probes are expanded in `start` only, at most {EXPAND_CALLS} times",
                pattern.chars().take(64).collect::<String>()
            )));
        }
        self.host.expand_calls -= 1;
        Ok(expand(&self.host.lister, &pattern))
    }

    fn describe(&mut self, probe: String) -> wasmtime::Result<Result<types::ProbeSchema, String>> {
        // A user probe's binary is read to find its function: it costs more.
        let cost = if is_user_probe(&probe) { USER_DESCRIBE_COST } else { 1 };
        if self.host.describe_calls < cost {
            return Ok(Err(format!(
                "`{}`: probes are described in `start` only, at most {DESCRIBE_CALLS} tracepoints \
                 (or {} user probes)",
                probe.chars().take(64).collect::<String>(),
                DESCRIBE_CALLS / USER_DESCRIBE_COST
            )));
        }
        self.host.describe_calls -= cost;
        Ok(describe(&self.host.describer, &probe))
    }

    fn user_strings(&mut self, probe: String, fields: Vec<String>) -> wasmtime::Result<Result<(), String>> {
        if self.host.strings_calls == 0 {
            return Ok(Err(format!(
                "`{}`: strings are asked for in `start` only, at most {STRINGS_CALLS} times",
                probe.chars().take(64).collect::<String>()
            )));
        }
        self.host.strings_calls -= 1;
        Ok(user_strings(&mut self.host.strings_asked, probe, fields))
    }
}

/// The schema `describer` gives tracepoint `probe`, for a well-formed name.
pub(crate) fn describe(describer: &super::super::SharedDescriber, probe: &str) -> Result<types::ProbeSchema, String> {
    if probe.len() > PATTERN_BYTES {
        return Err(format!("a probe name of {} bytes (at most {PATTERN_BYTES})", probe.len()));
    }
    let well_formed = probe
        .strip_prefix("tracepoint:")
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(c, n)| !c.is_empty() && !n.is_empty() && !probe.contains(['/', '\0', '*']));
    let user = is_user_probe(probe) && !probe.contains(['\0', '*']);
    if !well_formed && !user {
        return Err(format!(
            "`{probe}`: only tracepoints (`tracepoint:CATEGORY:NAME`) and user probes (`uprobe:BINARY:FUNCTION`, \
             `uretprobe:…`, `usdt:BINARY:PROVIDER:NAME`) are described"
        ));
    }
    let guard = describer.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(describe) => describe(probe),
        None => Err(format!("`{probe}`: there are no tracepoints to describe here")),
    }
}

/// A uprobe's, uretprobe's or USDT probe's name.
fn is_user_probe(probe: &str) -> bool {
    ["uprobe:", "uretprobe:", "usdt:"].iter().any(|c| probe.starts_with(c))
}

/// Note a `probes.user-strings` request in `asked`, bounded; the plan checks its fields.
pub(crate) fn user_strings(
    asked: &mut Vec<(String, Vec<String>)>,
    probe: String,
    fields: Vec<String>,
) -> Result<(), String> {
    let max = wasmtap_abi::strings::MAX;
    if probe.len() > STRINGS_NAME_BYTES || fields.iter().any(|f| f.len() > STRINGS_NAME_BYTES) {
        return Err(format!("a probe or field name longer than {STRINGS_NAME_BYTES} bytes"));
    }
    if fields.is_empty() {
        return Err(format!("`{probe}`: no field named"));
    }
    let at = match asked.iter().position(|(p, _)| *p == probe) {
        Some(at) => at,
        None => {
            asked.push((probe.clone(), Vec::new()));
            asked.len() - 1
        }
    };
    let have = &mut asked[at].1;
    for f in fields {
        if !have.contains(&f) {
            have.push(f);
        }
    }
    if have.len() > max {
        let n = have.len();
        asked.remove(at);
        return Err(format!("`{probe}`: strings of {n} fields asked for (at most {max} a probe)"));
    }
    Ok(())
}

/// The tracepoints matching `pattern`, from `lister` or the live system, bounded.
pub(crate) fn expand(lister: &super::super::SharedLister, pattern: &str) -> Result<Vec<String>, String> {
    if pattern.len() > PATTERN_BYTES {
        return Err(format!("a pattern of {} bytes (at most {PATTERN_BYTES})", pattern.len()));
    }
    let Some(rest) = pattern.strip_prefix("tracepoint:").or_else(|| pattern.strip_prefix("t:")) else {
        return Err(format!("`{pattern}`: only tracepoints are expanded (`tracepoint:CATEGORY:NAME`, with `*`)"));
    };
    if rest.is_empty() || rest.contains(['/', '\0']) {
        return Err(format!("`{pattern}` is not a tracepoint pattern"));
    }
    let guard = lister.lock().unwrap_or_else(|e| e.into_inner());
    let mut names = match guard.as_ref() {
        Some(list) => list(rest)?,
        None => return Err(format!("`{pattern}`: there are no tracepoints to expand it to here")),
    };
    drop(guard);
    names.sort();
    names.dedup();
    if names.is_empty() {
        return Err(format!("no tracepoint matches `{pattern}`"));
    }
    if names.len() > EXPAND_NAMES {
        return Err(format!("`{pattern}` matches {} tracepoints (at most {EXPAND_NAMES} a run)", names.len()));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lister(names: Vec<String>) -> crate::sandbox::SharedLister {
        let shared = crate::sandbox::SharedLister::default();
        // The patterns below end in their only `*`.
        *shared.lock().unwrap() = Some(Box::new(move |p: &str| {
            let prefix = p.strip_suffix('*').unwrap_or(p);
            Ok(names.iter().filter(|n| n["tracepoint:".len()..].starts_with(prefix)).cloned().collect())
        }));
        shared
    }

    #[test]
    fn strings_asked_for_are_kept_per_probe_once_each_and_bounded() {
        let mut asked = Vec::new();
        let probe = "tracepoint:syscalls:sys_enter_openat".to_string();
        assert_eq!(user_strings(&mut asked, probe.clone(), vec!["filename".into()]), Ok(()));
        assert_eq!(user_strings(&mut asked, probe.clone(), vec!["filename".into(), "a".into()]), Ok(()));
        assert_eq!(asked, [(probe.clone(), vec!["filename".to_string(), "a".to_string()])]);
        let err = user_strings(&mut asked, probe.clone(), vec!["b".into(), "c".into(), "d".into()]).unwrap_err();
        assert_eq!(err, "`tracepoint:syscalls:sys_enter_openat`: strings of 5 fields asked for (at most 4 a probe)");
        assert!(asked.is_empty(), "a refused request leaves nothing of the probe's");
        assert!(user_strings(&mut asked, "p".into(), vec![]).unwrap_err().contains("no field named"));
        let long = "x".repeat(300);
        assert!(user_strings(&mut asked, long, vec!["f".into()]).unwrap_err().contains("longer than 256 bytes"));
    }

    #[test]
    fn user_probes_reach_the_describer_and_other_kinds_do_not() {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        let live = crate::sandbox::SharedDescriber::default();
        *live.lock().unwrap() = Some(Box::new(move |p: &str| {
            seen.lock().unwrap().push(p.to_string());
            Ok(types::ProbeSchema { probe: p.to_string(), fields: Vec::new(), args: Vec::new() })
        }));
        for p in ["uprobe:/bin/sh:main", "uretprobe:libc:malloc", "usdt:/bin/x:p:n", "tracepoint:a:b"] {
            assert!(describe(&live, p).is_ok(), "{p}");
        }
        assert!(describe(&live, "uprobe:/bin/sh:f*").unwrap_err().contains("only tracepoints"));
        assert!(describe(&live, "kprobe:vfs_read").unwrap_err().contains("only tracepoints"));
        assert!(describe(&live, "tracepoint:a/b:c").unwrap_err().contains("only tracepoints"));
        assert_eq!(asked.lock().unwrap().len(), 4, "refused names never reach the describer");
    }

    #[test]
    fn a_pattern_expands_sorted_and_bounded_and_a_bad_one_says_why() {
        let some = lister(vec!["tracepoint:sched:sched_switch".into(), "tracepoint:sched:sched_exec".into()]);
        assert_eq!(
            expand(&some, "tracepoint:sched:*"),
            Ok(vec!["tracepoint:sched:sched_exec".to_string(), "tracepoint:sched:sched_switch".to_string()])
        );
        assert_eq!(expand(&some, "t:sched:sched_s*").map(|v| v.len()), Ok(1));
        assert_eq!(expand(&some, "tracepoint:irq:*"), Err("no tracepoint matches `tracepoint:irq:*`".into()));
        assert!(expand(&some, "uprobe:/bin/sh:*").unwrap_err().contains("only tracepoints are expanded"));
        assert!(expand(&some, "tracepoint:../x:*").unwrap_err().contains("is not a tracepoint pattern"));
        assert!(expand(&some, &format!("tracepoint:{}", "a".repeat(300))).unwrap_err().contains("at most 256"));
        let none = crate::sandbox::SharedLister::default();
        assert!(expand(&none, "tracepoint:c:*").unwrap_err().contains("no tracepoints to expand it to here"));
        let many = lister((0..1500).map(|i| format!("tracepoint:c:e{i:04}")).collect());
        assert_eq!(
            expand(&many, "tracepoint:c:*"),
            Err("`tracepoint:c:*` matches 1500 tracepoints (at most 1024 a run)".into())
        );
    }
}
