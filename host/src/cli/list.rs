//! `wasmtap list [PATTERN]`: probes and their fields.

use super::{ListArgs, Outcome};
use crate::collect::probes::{header_fields, kind_fields, PROBES};

pub fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    let pattern = args.pattern.as_deref().unwrap_or("*");
    let mut names: Vec<(String, &crate::collect::probes::ProbeDoc)> = Vec::new();
    for doc in PROBES {
        if doc.name.contains("NAME") {
            let dir = if doc.name.ends_with("entry") { "entry" } else { "exit" };
            for sys in wasmtap_abi::SYSCALL_NAMES.iter().filter(|s| !s.is_empty()) {
                let name = format!("syscall:{sys}:{dir}");
                if glob(pattern, &name) {
                    names.push((name, doc));
                }
            }
        } else if glob(pattern, doc.name) {
            names.push((doc.name.to_string(), doc));
        }
    }
    if names.is_empty() {
        anyhow::bail!("no probe matches `{pattern}`");
    }
    let verbose = names.len() <= 20;
    for (name, doc) in &names {
        println!("{name}");
        if verbose {
            println!("    # {}", doc.about);
            let fields: Vec<String> =
                header_fields().iter().chain(kind_fields(doc.kind)).map(|(n, t)| format!("{t} {n}")).collect();
            for f in fields {
                println!("    {f}");
            }
        }
    }
    if pattern == "*" {
        println!("\nNot available on this kernel: kprobe/kretprobe (CONFIG_KPROBES off), fentry/fexit (refused), hardware counters.");
    }
    Ok(Outcome::Clean)
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_matches_like_a_shell() {
        assert!(super::glob("syscall:open*", "syscall:openat:entry"));
        assert!(super::glob("*exec*", "proc:exec"));
        assert!(!super::glob("proc:*x", "proc:exec"));
        assert!(super::glob("proc:exec", "proc:exec"));
    }
}
