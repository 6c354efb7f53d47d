//! Folded stacks, what `flamegraph.pl` and inferno read: `outer;…;inner count`, one
//! line per stack.

use super::entries::merged;
use crate::wit::types::{AggEntry, AggValue, Aggregation, Frame, Value};

/// A frame as a folded element, like the SDK's `Frame::folded_name`: the function
/// without offset; `[file name of the module]` or the hex address when it is unknown.
pub(super) fn frame_name(f: &Frame) -> String {
    if !f.symbol.is_empty() {
        return element(&f.symbol);
    }
    match f.module.rsplit('/').next() {
        Some(module) if !module.is_empty() => format!("[{}]", element(module)),
        _ => format!("{:#x}", f.addr),
    }
}

/// Text made safe inside a folded line: `;` separates frames and a line break ends the
/// line, so they become `:` and a space; other control characters become `?`.
fn element(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// A stack (innermost frame first) folded: outermost first, `;`-separated.
pub fn stack(frames: &[Frame]) -> String {
    frames.iter().rev().map(frame_name).collect::<Vec<_>>().join(";")
}

/// The folded frames of a key: the parts that are not stacks first, in key order, as
/// frames of their own (`comm;…`); then the stack parts, read as consecutive pieces of
/// one stack innermost first (`[kstack, ustack]`) and folded outermost first.
pub(super) fn key(parts: &[Value]) -> String {
    let mut names: Vec<String> = parts
        .iter()
        .filter_map(|v| match v {
            Value::Int(i) => Some(i.to_string()),
            Value::Text(s) => Some(element(s)),
            Value::Stack(_) => None,
        })
        .collect();
    let frames: Vec<&Frame> = parts
        .iter()
        .flat_map(|v| match v {
            Value::Stack(frames) => frames.as_slice(),
            _ => &[],
        })
        .collect();
    names.extend(frames.into_iter().rev().map(frame_name));
    names.join(";")
}

/// True if some key of the aggregation holds a stack.
pub(super) fn has_stack(agg: &Aggregation) -> bool {
    agg.entries.iter().any(|e| e.key.iter().any(|v| matches!(v, Value::Stack(_))))
}

/// Folded lines of the scalar entries, as (frames, value), equal frames merged; and
/// whether histogram or percentile entries had to be left out. An empty key folds to
/// the aggregation's name.
pub(super) fn lines(agg: &Aggregation, entries: &[&AggEntry]) -> (Vec<(String, i64)>, bool) {
    let scalars = entries.iter().filter(|e| matches!(e.value, AggValue::Scalar(_)));
    let keyed = scalars.map(|e| {
        let k = key(&e.key);
        (if k.is_empty() { element(&agg.name) } else { k }, &e.value)
    });
    let lines = merged(agg.kind, keyed)
        .into_iter()
        .filter_map(|(k, v)| match v {
            AggValue::Scalar(n) => Some((k, n)),
            _ => None,
        })
        .collect();
    (lines, entries.iter().any(|e| !matches!(e.value, AggValue::Scalar(_))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::testing::{agg, frame, hist, scalar, stack as stack_value, text};
    use crate::wit::types::AggKind;

    fn render(agg: &Aggregation) -> (String, bool) {
        let entries = super::super::entries::sorted(agg);
        let (lines, skipped) = lines(agg, &entries);
        (lines.iter().map(|(k, n)| format!("{k} {n}\n")).collect(), skipped)
    }

    #[test]
    fn stacks_fold_outermost_first_after_the_other_key_parts() {
        let s = stack_value(vec![frame("leaf", 3), frame("mid", 7), frame("main", 1)]);
        let a = agg("cpu", AggKind::Count, &["comm", "stack"], vec![scalar(&[text("sh"), s], 12)]);
        assert_eq!(render(&a), ("sh;main;mid;leaf 12\n".to_string(), false));
    }

    #[test]
    fn stacks_differing_only_in_offsets_merge() {
        let a = agg(
            "cpu",
            AggKind::Count,
            &["stack"],
            vec![
                scalar(&[stack_value(vec![frame("f", 1), frame("main", 2)])], 5),
                scalar(&[stack_value(vec![frame("f", 9), frame("main", 2)])], 4),
                scalar(&[stack_value(vec![frame("g", 0), frame("main", 2)])], 6),
            ],
        );
        assert_eq!(render(&a).0, "main;f 9\nmain;g 6\n");
    }

    #[test]
    fn unknown_frames_show_their_module_or_address() {
        let libc = Frame { module: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(), ..frame("", 0) };
        let bare = Frame { addr: 0x7f00, ..frame("", 0) };
        let odd = frame("a;b\nc\u{1b}[2J", 0);
        let a = agg("x", AggKind::Sum, &["stack"], vec![scalar(&[stack_value(vec![odd, bare, libc])], 1)]);
        assert_eq!(render(&a).0, "[libc.so.6];0x7f00;a:b c?[2J 1\n");
    }

    #[test]
    fn kernel_and_user_stack_parts_fold_as_one_stack() {
        let kernel = stack_value(vec![frame("ksys_read", 0), frame("entry_SYSCALL_64", 0)]);
        let user = stack_value(vec![frame("read", 0), frame("main", 0)]);
        let a = agg("x", AggKind::Count, &["k", "u"], vec![scalar(&[kernel, user], 2)]);
        assert_eq!(render(&a).0, "main;read;entry_SYSCALL_64;ksys_read 2\n");
    }

    #[test]
    fn scalars_without_stacks_join_their_key_parts() {
        let a = agg(
            "bytes",
            AggKind::Sum,
            &["comm", "fd"],
            vec![scalar(&[text("Web Content"), Value::Int(3)], 40), scalar(&[text("ü;x"), Value::Int(-1)], -2)],
        );
        assert_eq!(render(&a).0, "ü:x;-1 -2\nWeb Content;3 40\n");
        let total = agg("total", AggKind::Count, &[], vec![scalar(&[], 7)]);
        assert_eq!(render(&total).0, "total 7\n");
        assert_eq!(render(&agg("none", AggKind::Count, &["k"], vec![])), (String::new(), false));
    }

    #[test]
    fn histograms_have_no_folded_form() {
        let a = agg(
            "lat",
            AggKind::Quantize,
            &["k"],
            vec![AggEntry { key: vec![text("a")], value: hist(&[(0, 1, 1)], 0) }],
        );
        assert_eq!(render(&a), (String::new(), true));
    }
}
