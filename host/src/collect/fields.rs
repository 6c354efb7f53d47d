//! The one field locator: where a value a plugin names (`fd`, `arg2`, `ret`, `prev_pid`,
//! `addr`) sits in a probe's records, for the comparisons the collectors and the host
//! evaluate and for the kernel aggregations' keys and values.

use wasmtap_abi::Kind;

use super::table::{Op, Pred};
use super::tracefs::{FieldKind, Format};
use crate::wit::types::{CmpOp, Predicate};

/// A field a predicate may name: where its value sits and how to read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldLoc {
    pub off: u16,
    pub size: u8,
    pub signed: bool,
}

/// A value of a syscall probe: one of its six arguments, or the return value of an exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyscallValue {
    Arg(u16),
    Ret,
}

impl SyscallValue {
    /// Where it sits in a syscall record, from its values on: `args[i]` of a
    /// `sys_enter` record and `ret` of a `sys_exit` record both start at offset 64
    /// (`wasmtap_abi::sys_enter::ARGS`, `sys_exit::RET`).
    pub fn in_record(self) -> FieldLoc {
        match self {
            SyscallValue::Arg(i) => FieldLoc { off: 8 * i, size: 8, signed: false },
            SyscallValue::Ret => FieldLoc { off: 0, size: 8, signed: true },
        }
    }

    /// Where it sits in the context of the `raw_syscalls` tracepoints that kernel
    /// aggregations read: after the 8-byte syscall id, `args[6]` or `ret`.
    pub fn in_context(self) -> FieldLoc {
        let loc = self.in_record();
        FieldLoc { off: 8 + loc.off, ..loc }
    }
}

/// The value `field` names on a syscall probe of `kind`: `arg0`..`arg5`, an argument's
/// name from the syscall's format (`names`, empty when not known), or `ret` on an exit.
pub fn syscall_value(kind: Kind, names: &[String], field: &str) -> Result<SyscallValue, String> {
    if kind == Kind::SysExit {
        return match field {
            "ret" => Ok(SyscallValue::Ret),
            _ => Err(format!("syscall exits have one field, `ret`, not `{field}`")),
        };
    }
    field
        .strip_prefix("arg")
        .and_then(|n| n.parse::<u16>().ok())
        .filter(|i| *i < 6)
        .or_else(|| names.iter().position(|n| n == field).map(|i| i as u16))
        .map(SyscallValue::Arg)
        .ok_or_else(|| {
            let known = if names.is_empty() { "arg0..arg5".to_string() } else { names.join(", ") };
            format!("no argument `{field}` (it has: {known})")
        })
}

/// Where `field` sits in a uprobe or USDT record whose values are named `args`
/// (`arg0`.. or `retval`).
pub fn user_value(args: &[String], field: &str) -> Result<FieldLoc, String> {
    let i = args.iter().position(|a| a == field).ok_or_else(|| {
        let known = if args.is_empty() { "none".to_string() } else { args.join(", ") };
        format!("no value `{field}` to compare (it has: {known})")
    })?;
    Ok(FieldLoc { off: (wasmtap_abi::user::ARGS + 8 * i) as u16, size: 8, signed: true })
}

/// Where `field` sits in a perf sample record.
pub fn sample_field(field: &str) -> Result<FieldLoc, String> {
    use wasmtap_abi::sample;
    match field {
        "addr" => Ok(FieldLoc { off: sample::ADDR as u16, size: 8, signed: false }),
        "ip" => Ok(FieldLoc { off: sample::IP as u16, size: 8, signed: false }),
        "cpu" => Ok(FieldLoc { off: sample::CPU as u16, size: 4, signed: false }),
        _ => Err(format!("no field `{field}` (it has: addr, ip, cpu)")),
    }
}

/// Where a named field of a tracepoint entry sits, for a comparison.
pub fn tracepoint_field(format: &Format, field: &str) -> Result<FieldLoc, String> {
    let f = format.fields.iter().find(|f| f.name == field).ok_or_else(|| {
        let names: Vec<&str> = format.fields.iter().filter(|f| !f.common).map(|f| f.name.as_str()).collect();
        format!(
            "tracepoint `{}:{}` has no field `{field}` (it has: {})",
            format.category,
            format.name,
            names.join(", ")
        )
    })?;
    match f.kind {
        FieldKind::Signed | FieldKind::Unsigned if matches!(f.size, 1 | 2 | 4 | 8) => {
            Ok(FieldLoc { off: f.offset as u16, size: f.size as u8, signed: f.kind == FieldKind::Signed })
        }
        _ => Err(format!("field `{field}` ({}) is not a number; compare it in the plugin", f.c_type)),
    }
}

/// The offset of pointer field `field` of a tracepoint entry, whose string (in the
/// traced process's memory) its records are to carry.
pub fn tracepoint_string(format: &Format, field: &str) -> Result<u16, String> {
    let f = format.fields.iter().find(|f| f.name == field && !f.common).ok_or_else(|| {
        let pointers: Vec<&str> = format
            .fields
            .iter()
            .filter(|f| !f.common && f.size == 8 && f.c_type.contains('*'))
            .map(|f| f.name.as_str())
            .collect();
        let has = if pointers.is_empty() { "none".to_string() } else { pointers.join(", ") };
        format!("tracepoint `{}:{}` has no field `{field}` (its pointers: {has})", format.category, format.name)
    })?;
    match f.kind {
        FieldKind::Signed | FieldKind::Unsigned if f.size == 8 && f.offset + 8 <= format.fixed_size() => {
            Ok(f.offset as u16)
        }
        _ => Err(format!("field `{field}` ({}) is not a pointer: str() reads a string it points to", f.c_type)),
    }
}

/// The kernel's form of a plugin's comparisons, each field found by `locate`: at most 64.
pub fn compile_preds(
    preds: &[Predicate],
    locate: impl Fn(&str) -> Result<FieldLoc, String>,
) -> Result<Vec<Pred>, String> {
    if preds.len() > 64 {
        return Err("more than 64 comparisons".into());
    }
    preds
        .iter()
        .map(|p| {
            let loc = locate(&p.field)?;
            let op = match p.op {
                CmpOp::Eq => Op::Eq,
                CmpOp::Ne => Op::Ne,
                CmpOp::Lt => Op::Lt,
                CmpOp::Le => Op::Le,
                CmpOp::Gt => Op::Gt,
                CmpOp::Ge => Op::Ge,
                CmpOp::MaskAny => Op::MaskAny,
                CmpOp::MaskNone => Op::MaskNone,
            };
            Ok(Pred { off: loc.off, size: loc.size, signed: loc.signed, op, value: p.value as u64 })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syscall_value_is_found_once_and_placed_for_records_and_for_the_kernel() {
        let names: Vec<String> = ["dfd", "filename", "flags", "mode"].map(String::from).to_vec();
        let flags = syscall_value(Kind::SysEnter, &names, "flags").unwrap();
        assert_eq!(flags, syscall_value(Kind::SysEnter, &names, "arg2").unwrap());
        assert_eq!(flags.in_record(), FieldLoc { off: 16, size: 8, signed: false });
        assert_eq!(flags.in_context(), FieldLoc { off: 24, size: 8, signed: false });
        let ret = syscall_value(Kind::SysExit, &[], "ret").unwrap();
        assert_eq!((ret.in_record(), ret.in_context().off), (FieldLoc { off: 0, size: 8, signed: true }, 8));

        let err = |kind, names: &[String], f| syscall_value(kind, names, f).unwrap_err();
        assert_eq!(err(Kind::SysEnter, &names, "path"), "no argument `path` (it has: dfd, filename, flags, mode)");
        assert_eq!(err(Kind::SysEnter, &[], "arg6"), "no argument `arg6` (it has: arg0..arg5)");
        assert_eq!(err(Kind::SysExit, &[], "arg0"), "syscall exits have one field, `ret`, not `arg0`");
    }

    #[test]
    fn user_and_sample_values_name_what_there_is() {
        let args: Vec<String> = vec!["retval".into()];
        assert_eq!(user_value(&args, "retval").unwrap().off as usize, wasmtap_abi::user::ARGS);
        assert_eq!(user_value(&[], "arg0").unwrap_err(), "no value `arg0` to compare (it has: none)");
        assert_eq!(sample_field("cpu").unwrap().size, 4);
        assert_eq!(sample_field("pc").unwrap_err(), "no field `pc` (it has: addr, ip, cpu)");
    }
}
