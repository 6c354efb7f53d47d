//! `wasmtap list [PATTERN]`: probes and what they carry. Tracepoints come from tracefs
//! with the fields of their format files; `uprobe:BINARY:*` lists a binary's functions,
//! `usdt:BINARY` its USDT probes with their arguments.

use std::path::Path;

use super::{ListArgs, Outcome};
use crate::collect::probes::{header_fields, kind_fields, PROBES, SOFTWARE_EVENTS};
use crate::collect::{elf, tracefs};

pub fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    let pattern = args.pattern.as_deref().unwrap_or("*");
    let mut lines = Vec::new();
    if let Some(rest) = pattern.strip_prefix("uprobe:").or_else(|| pattern.strip_prefix("uretprobe:")) {
        list_functions(pattern, rest, &mut lines)?;
    } else if let Some(rest) = pattern.strip_prefix("usdt:") {
        list_usdt(rest, &mut lines)?;
    } else {
        list_probes(pattern, &mut lines)?;
    }
    if lines.is_empty() {
        anyhow::bail!("no probe matches `{pattern}`");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for l in lines {
        use std::io::Write;
        if writeln!(out, "{l}").is_err() {
            break;
        }
    }
    Ok(Outcome::Clean)
}

fn list_probes(pattern: &str, lines: &mut Vec<String>) -> anyhow::Result<()> {
    let mut names: Vec<(String, Vec<String>)> = Vec::new();
    let fields = |kind| -> Vec<String> {
        header_fields().iter().chain(kind_fields(kind)).map(|(n, t)| format!("{t} {n}")).collect()
    };
    for doc in PROBES {
        let placeholder = doc.name.contains(|c: char| c.is_ascii_uppercase());
        if doc.name.starts_with("syscall:NAME") {
            let dir = if doc.name.ends_with("entry") { "entry" } else { "exit" };
            for sys in wasmtap_abi::SYSCALL_NAMES.iter().filter(|s| !s.is_empty()) {
                let name = format!("syscall:{sys}:{dir}");
                if glob(pattern, &name) {
                    let mut f = vec![format!("# {}", doc.about)];
                    f.extend(doc.kind.map(fields).unwrap_or_default());
                    names.push((name, f));
                }
            }
        } else if doc.name.starts_with("btf:") {
            for (event, _, about, _) in crate::collect::table::BTF_EVENTS {
                let name = format!("btf:{event}");
                if glob(pattern, &name) {
                    let mut f = vec![format!("# {about}")];
                    let format = crate::collect::table::btf_format(event).map_err(|e| anyhow::anyhow!(e))?;
                    f.extend(format.fields.iter().filter(|f| !f.common).map(declaration));
                    names.push((name, f));
                }
            }
        } else if doc.name.starts_with("software:") {
            for ev in SOFTWARE_EVENTS {
                let name = format!("software:{}:{}", ev.name, ev.default_period);
                if glob(pattern, &name) || glob(pattern, &format!("software:{}", ev.name)) {
                    let mut f = vec![format!("# {} (default period {})", ev.about, ev.default_period)];
                    f.extend(doc.kind.map(fields).unwrap_or_default());
                    names.push((name, f));
                }
            }
        } else if glob(pattern, doc.name) && (pattern != "*" || !doc.name.starts_with("tracepoint:CATEGORY")) {
            let mut f = vec![format!("# {}", doc.about)];
            if !placeholder || doc.name.starts_with("profile") {
                f.extend(doc.kind.map(fields).unwrap_or_default());
            }
            names.push((doc.name.to_string(), f));
        }
    }
    let tp_pattern = match pattern.strip_prefix("tracepoint:") {
        Some(p) => Some(p),
        None if pattern == "*" => Some("*"),
        None => None,
    };
    if let Some(tp) = tp_pattern {
        tracefs::ensure_mounted();
        let root = Path::new(tracefs::ROOT);
        let events = tracefs::events(root, tp).map_err(|e| anyhow::anyhow!("{e}"))?;
        let verbose = events.len() <= 20;
        for (cat, name) in events {
            let probe = format!("tracepoint:{cat}:{name}");
            if names.iter().any(|(n, _)| *n == probe) {
                continue;
            }
            let mut f = Vec::new();
            if verbose {
                let format = tracefs::read_format(root, &cat, &name).map_err(|e| anyhow::anyhow!("{e}"))?;
                f.extend(format.fields.iter().filter(|f| !f.common).map(declaration));
            }
            names.push((probe, f));
        }
    }
    let verbose = names.len() <= 20;
    for (name, fields) in names {
        lines.push(name);
        if verbose {
            lines.extend(fields.into_iter().map(|f| format!("    {f}")));
        }
    }
    if pattern == "*" {
        lines.push(String::new());
        lines.push("Also: uprobe:BINARY:FUNCTION (`wasmtap list 'uprobe:BINARY:*'` lists functions), usdt:BINARY:PROVIDER:NAME (`wasmtap list usdt:BINARY`).".into());
        lines.push("Not available on this kernel: kprobe/kretprobe (CONFIG_KPROBES off), fentry/fexit (refused), hardware counters.".into());
    }
    Ok(())
}

/// A field as its format file declares it: `int sig;`, `char comm[16];`, `__data_loc char[] name;`.
fn declaration(f: &tracefs::Field) -> String {
    let fixed_array = matches!(f.kind, tracefs::FieldKind::Text | tracefs::FieldKind::Array);
    match f.c_type.find('[') {
        Some(i) if fixed_array => format!("{} {}{};", f.c_type[..i].trim_end(), f.name, &f.c_type[i..]),
        _ => format!("{} {};", f.c_type, f.name),
    }
}

fn list_functions(pattern: &str, rest: &str, lines: &mut Vec<String>) -> anyhow::Result<()> {
    let (binary, func) = rest.rsplit_once(':').unwrap_or((rest, "*"));
    let path = elf::find_binary(binary)?;
    let class = if pattern.starts_with("uretprobe:") { "uretprobe" } else { "uprobe" };
    for f in elf::functions(&path)? {
        if glob(func, &f.name) {
            lines.push(format!("{class}:{}:{}", path.display(), f.name));
        }
    }
    Ok(())
}

fn list_usdt(rest: &str, lines: &mut Vec<String>) -> anyhow::Result<()> {
    let (binary, probe) = match rest.split_once(':') {
        Some((b, p)) => (b, p),
        None => (rest, "*"),
    };
    let path = elf::find_binary(binary)?;
    let mut seen = std::collections::BTreeSet::new();
    for p in elf::usdt_probes(&path)? {
        let name = format!("{}:{}", p.provider, p.name);
        if !glob(probe, &name) && !glob(probe, &p.name) || !seen.insert(name.clone()) {
            continue;
        }
        lines.push(format!("usdt:{}:{name}", path.display()));
        for (i, a) in p.args.iter().enumerate() {
            let ty = format!("{}{}", if a.signed { "s" } else { "u" }, a.size as u32 * 8);
            lines.push(format!("    {ty} arg{i}"));
        }
    }
    Ok(())
}

/// `*` matches any run of characters, `?` any one; everything else matches itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    tracefs::glob(pattern, name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_matches_like_a_shell() {
        assert!(super::glob("syscall:open*", "syscall:openat:entry"));
        assert!(super::glob("*exec*", "proc:exec"));
        assert!(!super::glob("proc:*x", "proc:exec"));
        assert!(super::glob("proc:exec", "proc:exec"));
        assert!(super::glob("sched:sched_sw?tch", "sched:sched_switch"));
    }
}
