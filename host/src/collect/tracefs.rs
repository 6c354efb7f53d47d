//! Tracepoints as the kernel describes them: which exist, and where each field of a record sits.
//! Tracepoints are found by glob (`sched:*`, `*:*open*`), their `events/CATEGORY/NAME/format`
//! files are checked as they are read, and a mistyped name gets the nearest real ones back.
//!
//! ```no_run
//! use std::path::Path;
//! use wasmtap::collect::tracefs::{self, FieldKind};
//!
//! tracefs::ensure_mounted();
//! let root = Path::new(tracefs::ROOT);
//! println!("{} scheduler tracepoints", tracefs::events(root, "sched:*")?.len());
//! let format = tracefs::lookup(root, "sched", "sched_switch")?;
//! let comm = format.field("next_comm").expect("sched_switch names the next task");
//! assert_eq!((comm.kind, comm.offset, comm.size), (FieldKind::Text, 40, 16));
//! println!("id {}, {} bytes before dynamic data", format.id, format.fixed_size());
//! # Ok::<(), tracefs::FormatError>(())
//! ```
//!
//! Needs tracefs (Linux 4.1+) at [`ROOT`], usually readable by root only.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where tracefs lives.
pub const ROOT: &str = "/sys/kernel/tracing";

/// Largest offset or size accepted: `__data_loc` locators address a record with 16 bits.
const MAX_OFFSET: u64 = 65535;

/// Mount tracefs at [`ROOT`] if it is not there yet (needs CAP_SYS_ADMIN; best effort:
/// without it, reading a format file then names the missing path). Through mount(2), so
/// no `mount` program is looked up in `$PATH`.
pub fn ensure_mounted() {
    if Path::new(ROOT).join("events").is_dir() {
        return;
    }
    let _ = crate::sys::creds::mount_tracefs(ROOT);
}

/// Why a tracepoint or its format could not be found or read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("unknown tracepoint `{category}:{name}`{}", did_you_mean(.suggestions))]
    UnknownEvent { category: String, name: String, suggestions: Vec<String> },
    #[error("tracepoint category `{category}` does not exist{}", did_you_mean(.suggestions))]
    UnknownCategory { category: String, suggestions: Vec<String> },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("bad format file for {category}:{name} at line {line}: {reason}")]
    Parse { category: String, name: String, line: usize, reason: String },
}

/// How a field's bytes are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FieldKind {
    /// A signed integer of `size` bytes.
    Signed,
    /// An unsigned integer of `size` bytes; also pointers and `bool`.
    Unsigned,
    /// `char name[N]`: a NUL-padded string in place.
    Text,
    /// `__data_loc char[]` (or `__rel_loc`): a string after the fixed part. The field's 4 bytes
    /// locate it: offset in the low 16 bits, length in the high 16.
    DynamicText,
    /// Any other located array, e.g. `__data_loc u64[]`.
    DynamicBytes,
    /// A fixed array of `count` integers; also an opaque by-value struct, as `count` bytes.
    Array,
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    /// The type as written, without the name: `const char *`, `__data_loc char[]`, `char[16]`.
    pub c_type: String,
    pub kind: FieldKind,
    pub offset: u32,
    pub size: u32,
    /// Array elements (bytes for [`FieldKind::Text`]); 1 otherwise.
    pub count: u32,
    pub signed: bool,
    /// `common_*`: present in every record.
    pub common: bool,
    /// A `__rel_loc` locator: its offset counts from the end of this field, not the record start.
    #[serde(default)] // recordings written without it still load
    pub relative: bool,
}

/// The layout of one tracepoint's records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Format {
    pub category: String,
    pub name: String,
    /// The id in the record's `common_type`.
    pub id: u32,
    /// In file order, common ones first.
    pub fields: Vec<Field>,
}

impl Format {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Bytes of the fixed part (the largest offset + size); dynamic data follows it.
    pub fn fixed_size(&self) -> u32 {
        self.fields.iter().map(|f| f.offset + f.size).max().unwrap_or(0)
    }

    /// Fields whose data lives after the fixed part.
    pub fn dynamic_fields(&self) -> impl Iterator<Item = &Field> {
        self.fields.iter().filter(|f| matches!(f.kind, FieldKind::DynamicText | FieldKind::DynamicBytes))
    }
}

/// Parse the text of `events/CATEGORY/NAME/format`.
pub fn parse_format(category: &str, name: &str, text: &str) -> Result<Format, FormatError> {
    let bad = |line, reason| FormatError::Parse { category: category.into(), name: name.into(), line, reason };
    let (mut id, mut fields, mut lines) = (None, Vec::new(), 0);
    for (i, line) in text.lines().enumerate() {
        lines = i + 1;
        let line = line.trim();
        // The print format is C for the kernel's own printer and may span lines; it ends the layout.
        if line.starts_with("print fmt:") {
            break;
        }
        parse_line(line, name, &mut id, &mut fields).map_err(|reason| bad(lines, reason))?;
    }
    let id = id.ok_or_else(|| bad(lines, "no `ID:` line".into()))?;
    if fields.is_empty() {
        return Err(bad(lines, "no fields".into()));
    }
    Ok(Format { category: category.into(), name: name.into(), id, fields })
}

fn parse_line(line: &str, event: &str, id: &mut Option<u32>, fields: &mut Vec<Field>) -> Result<(), String> {
    match line.split_once(':').map(|(key, value)| (key, value.trim())) {
        _ if line.is_empty() || line == "format:" => Ok(()),
        Some(("name", value)) if value == event => Ok(()),
        Some(("name", value)) => Err(format!("it describes event `{}`", clip(value))),
        Some(("ID", _)) if id.is_some() => Err("a second `ID:` line".into()),
        Some(("ID", value)) => {
            *id = Some(number(value, "ID", u32::MAX.into())? as u32);
            Ok(())
        }
        Some(("field", _)) => {
            let field = parse_field(line)?;
            if fields.iter().any(|f| f.name == field.name) {
                return Err(format!("field `{}` appears twice", field.name));
            }
            fields.push(field);
            Ok(())
        }
        _ => Err(format!("unexpected `{}`", clip(line))),
    }
}

/// `field:TYPE NAME[N];` `offset:N;` `size:N;` `signed:N;`, tab-separated.
fn parse_field(line: &str) -> Result<Field, String> {
    let (mut decl, mut offset, mut size, mut signed) = (None, None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part.split_once(':').ok_or_else(|| format!("`{}` is not KEY:VALUE", clip(part)))?;
        match key {
            "field" => decl = Some(value.trim()),
            "offset" => offset = Some(number(value, "offset", MAX_OFFSET)?),
            "size" => size = Some(number(value, "size", MAX_OFFSET)?),
            "signed" => signed = number(value, "signed", 1)? == 1,
            _ => {} // a key from a newer kernel
        }
    }
    let (Some(decl), Some(offset), Some(size)) = (decl, offset, size) else {
        return Err("a field needs `field:`, `offset:` and `size:`".into());
    };
    if size == 0 {
        return Err(format!("field `{}` has size 0", clip(decl)));
    }
    let (ty, name, bracket) = split_decl(decl)?;
    let (kind, count, relative) = classify(ty, bracket, size, signed).map_err(|e| format!("field `{name}`: {e}"))?;
    let c_type = bracket.map_or_else(|| ty.to_string(), |b| format!("{ty}[{b}]"));
    let (name, common, offset, size) = (name.to_string(), name.starts_with("common_"), offset as u32, size as u32);
    Ok(Field { name, c_type, kind, offset, size, count, signed, common, relative })
}

/// `const char * filename` → (`const char *`, `filename`, None); `char comm[16]` → (`char`, `comm`, Some("16")).
fn split_decl(decl: &str) -> Result<(&str, &str, Option<&str>), String> {
    let (head, bracket) = match decl.strip_suffix(']').and_then(|d| d.rsplit_once('[')) {
        Some((head, inner)) => (head.trim_end(), Some(inner.trim())),
        None => (decl, None),
    };
    let ty = head.trim_end_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
    let name = &head[ty.len()..];
    let separated = ty.ends_with(|c: char| c.is_whitespace() || c == '*');
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || !separated || ty.trim().is_empty() {
        return Err(format!("cannot split `{}` into a type and a name", clip(decl)));
    }
    Ok((ty.trim_end(), name, bracket))
}

fn classify(ty: &str, bracket: Option<&str>, size: u64, signed: bool) -> Result<(FieldKind, u32, bool), String> {
    // `__rel_loc` (Linux 5.17+) counts its offset from the end of the field, not the record.
    let relative = ty.starts_with("__rel_loc ");
    if let Some(elem) = ty.strip_prefix("__data_loc ").or(ty.strip_prefix("__rel_loc ")) {
        if size != 4 || bracket.is_some() {
            return Err(format!("a `{ty}` locator takes 4 bytes, not {size}"));
        }
        let elem = elem.trim().strip_suffix("[]").unwrap_or(elem);
        let kind = if words(elem) == ["char"] { FieldKind::DynamicText } else { FieldKind::DynamicBytes };
        return Ok((kind, 1, relative));
    }
    let integer = if signed { FieldKind::Signed } else { FieldKind::Unsigned };
    let Some(bracket) = bracket else {
        return Ok(match size {
            _ if ty.ends_with('*') || words(ty) == ["bool"] => (FieldKind::Unsigned, 1, false),
            1 | 2 | 4 | 8 => (integer, 1, false),
            _ => (FieldKind::Array, size as u32, false), // a struct by value: its bytes
        });
    };
    if words(ty) == ["char"] {
        return Ok((FieldKind::Text, size as u32, false));
    }
    let declared = bracket.parse::<u64>().ok().filter(|n| *n > 0);
    let count = match (elem_size(ty), declared) {
        (Some(elem), _) if size.is_multiple_of(elem) => size / elem,
        (None, Some(n)) if size.is_multiple_of(n) => n,
        _ => return Err(format!("cannot split {size} bytes into `{ty}` elements")),
    };
    if declared.is_some_and(|n| n != count) {
        return Err(format!("{size} bytes hold {count} `{ty}` elements, not {bracket}"));
    }
    Ok((FieldKind::Array, count as u32, false))
}

/// The type's words without qualifiers.
fn words(ty: &str) -> Vec<&str> {
    ty.split_whitespace().filter(|w| !matches!(*w, "const" | "volatile")).collect()
}

/// Bytes of one element of an integer or pointer type on a 64-bit kernel, when known.
fn elem_size(ty: &str) -> Option<u64> {
    if ty.ends_with('*') {
        return Some(8);
    }
    let words: Vec<&str> = words(ty).into_iter().filter(|w| !matches!(*w, "signed" | "unsigned")).collect();
    Some(match words.as_slice() {
        ["char" | "bool" | "u8" | "s8" | "__u8" | "__s8"] => 1,
        ["short" | "u16" | "s16" | "__u16" | "__s16" | "__le16" | "__be16"] | ["short", "int"] => 2,
        [] | ["int" | "u32" | "s32" | "__u32" | "__s32" | "__le32" | "__be32" | "pid_t" | "uid_t" | "gid_t"] => 4,
        ["long" | "u64" | "s64" | "__u64" | "__s64" | "__le64" | "__be64" | "size_t" | "ssize_t" | "loff_t"] => 8,
        ["long", "long" | "int"] | ["long", "long", "int"] => 8,
        _ => return None,
    })
}

fn number(value: &str, what: &str, max: u64) -> Result<u64, String> {
    match value.trim().parse() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("{what} `{}` is not a number up to {max}", clip(value.trim()))),
    }
}

/// Enough of a bad line to recognise it in an error message.
fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Read and parse one tracepoint's format; `root` is normally [`ROOT`].
pub fn read_format(root: &Path, category: &str, name: &str) -> Result<Format, FormatError> {
    // Both name one directory each: `..` or `a/b` would read a file outside `root/events`.
    let valid = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0']);
    if !valid(category) || !valid(name) {
        let (category, name, suggestions) = (category.into(), name.into(), Vec::new());
        return Err(FormatError::UnknownEvent { category, name, suggestions });
    }
    let path = root.join("events").join(category).join(name).join("format");
    let text = std::fs::read_to_string(&path).map_err(|source| FormatError::Read { path, source })?;
    parse_format(category, name, &text)
}

/// All `(category, name)` pairs under `root/events` whose `category:name` matches `pattern`
/// (`*` any run of characters, `?` one; empty means all), sorted. The `ftrace` category holds
/// the function tracer's own records, not tracepoints, and is left out.
pub fn events(root: &Path, pattern: &str) -> Result<Vec<(String, String)>, FormatError> {
    let mut found = Vec::new();
    for category in subdirs(&root.join("events"))? {
        if category == "ftrace" {
            continue;
        }
        for name in subdirs(&root.join("events").join(&category))? {
            if pattern.is_empty() || glob(pattern, &format!("{category}:{name}")) {
                found.push((category.clone(), name));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `tracepoint:CATEGORY:NAME` of the live system's tracepoints whose `CATEGORY:NAME`
/// matches `pattern` (`*` wildcards): what a plugin's `probes.expand` answers in a run.
pub fn tracepoint_names(pattern: &str) -> Result<Vec<String>, String> {
    ensure_mounted();
    let events = events(Path::new(ROOT), pattern).map_err(|e| e.to_string())?;
    Ok(events.into_iter().map(|(c, n)| format!("tracepoint:{c}:{n}")).collect())
}

fn subdirs(dir: &Path) -> Result<Vec<String>, FormatError> {
    let failed = |source| FormatError::Read { path: dir.to_path_buf(), source };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        if entry.file_type().map_err(failed)?.is_dir() {
            names.extend(entry.file_name().into_string());
        }
    }
    Ok(names)
}

/// [`read_format`] for a name a user typed: a missing tracepoint comes back as
/// [`FormatError::UnknownEvent`] or [`FormatError::UnknownCategory`] with the nearest real names.
pub fn lookup(root: &Path, category: &str, name: &str) -> Result<Format, FormatError> {
    match read_format(root, category, name) {
        Err(FormatError::Read { source, .. })
            if matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) =>
        {
            let known = events(root, "")?;
            let suggestions = nearest(&format!("{category}:{name}"), known.iter().map(|(c, n)| format!("{c}:{n}")));
            Err(if root.join("events").join(category).is_dir() {
                FormatError::UnknownEvent { category: category.into(), name: name.into(), suggestions }
            } else {
                FormatError::UnknownCategory { category: category.into(), suggestions }
            })
        }
        other => other,
    }
}

/// Up to three candidates at the smallest edit distance from `wanted`, if that is small.
fn nearest(wanted: &str, candidates: impl Iterator<Item = String>) -> Vec<String> {
    let limit = wanted.chars().count().max(4) / 3;
    let mut near: Vec<(usize, String)> = candidates
        .filter(|c| c.chars().count().abs_diff(wanted.chars().count()) <= limit)
        .map(|c| (super::probes::edit_distance(wanted, &c), c))
        .filter(|(d, _)| *d <= limit)
        .collect();
    near.sort();
    let best = near.first().map(|(d, _)| *d);
    near.into_iter().take_while(|(d, _)| Some(*d) == best).take(3).map(|(_, c)| c).collect()
}

fn did_you_mean(near: &[String]) -> String {
    let near: Vec<String> = near.iter().map(|s| format!("`{s}`")).collect();
    if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", near.join(" or "))
    }
}

/// Shell-style matching of the whole `text`: `*` is any run of characters, `?` one character.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star) = (0, 0, None);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            (pi, ti) = (pi + 1, ti + 1);
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            // Let the last `*` swallow one more character and retry from there.
            star = Some((sp, st + 1));
            (pi, ti) = (sp + 1, st + 1);
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use FieldKind::*;

    /// A format file: the common fields, then `fields` as copied from Linux 6.18.
    fn event(name: &str, id: u32, fields: &str) -> String {
        format!(
            "name: {name}\nID: {id}\nformat:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

{fields}
print fmt: \"%s\nmay span lines; field:junk\", REC->{name}\n"
        )
    }

    fn signal_generate() -> String {
        event(
            "signal_generate",
            261,
            "\tfield:int sig;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int errno;\toffset:12;\tsize:4;\tsigned:1;
\tfield:int code;\toffset:16;\tsize:4;\tsigned:1;
\tfield:char comm[16];\toffset:20;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:36;\tsize:4;\tsigned:1;
\tfield:int group;\toffset:40;\tsize:4;\tsigned:1;
\tfield:int result;\toffset:44;\tsize:4;\tsigned:1;\n",
        )
    }

    fn sched_switch() -> String {
        event(
            "sched_switch",
            372,
            "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n",
        )
    }

    /// Not a real event: every kind of field the kernel writes, in one format.
    fn mixed() -> String {
        event(
            "mixed",
            9,
            "\tfield:u8 mac[6];\toffset:8;\tsize:6;\tsigned:0;
\tfield:char comm[TASK_COMM_LEN];\toffset:14;\tsize:16;\tsigned:0;
\tfield:unsigned long args[6];\toffset:32;\tsize:48;\tsigned:0;
\tfield:xfs_ino_t inos[3];\toffset:80;\tsize:24;\tsigned:0;
\tfield:__data_loc u64[] stack;\toffset:104;\tsize:4;\tsigned:0;
\tfield:__rel_loc char[] path;\toffset:108;\tsize:4;\tsigned:0;
\tfield:bool ok;\toffset:112;\tsize:1;\tsigned:0;
\tfield:struct in6_addr addr;\toffset:116;\tsize:16;\tsigned:0;\n",
        )
    }

    fn layout(f: &Format) -> Vec<(&str, FieldKind, u32, u32, u32)> {
        f.fields.iter().map(|f| (f.name.as_str(), f.kind, f.offset, f.size, f.count)).collect()
    }

    #[test]
    fn signal_generate_and_sched_switch_fields_sit_where_the_kernel_says() {
        let f = parse_format("signal", "signal_generate", &signal_generate()).unwrap();
        assert_eq!(
            (f.id, f.fixed_size(), f.dynamic_fields().count(), f.fields.iter().filter(|f| f.common).count()),
            (261, 48, 0, 4)
        );
        assert_eq!(layout(&f)[..2], [("common_type", Unsigned, 0, 2, 1), ("common_flags", Unsigned, 2, 1, 1)]);
        assert_eq!(layout(&f)[7..9], [("comm", Text, 20, 16, 16), ("pid", Signed, 36, 4, 1)]);
        assert_eq!(f.field("comm").unwrap().c_type, "char[16]");
        let f = parse_format("sched", "sched_switch", &sched_switch()).unwrap();
        assert_eq!(layout(&f)[7..9], [("prev_state", Signed, 32, 8, 1), ("next_comm", Text, 40, 16, 16)]);
        assert_eq!((f.id, f.fixed_size(), f.field("prev_state").unwrap().c_type.as_str()), (372, 64, "long"));
    }

    #[test]
    fn openat_filename_is_a_user_pointer() {
        let text = event(
            "sys_enter_openat",
            782,
            "\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:int dfd;\toffset:16;\tsize:8;\tsigned:0;
\tfield:const char * filename;\toffset:24;\tsize:8;\tsigned:0;
\tfield:int flags;\toffset:32;\tsize:8;\tsigned:0;
\tfield:umode_t mode;\toffset:40;\tsize:8;\tsigned:0;\n",
        );
        let f = parse_format("syscalls", "sys_enter_openat", &text).unwrap();
        assert_eq!(layout(&f)[5..7], [("dfd", Unsigned, 16, 8, 1), ("filename", Unsigned, 24, 8, 1)]);
        assert_eq!(f.field("filename").unwrap().c_type, "const char *");
    }

    #[test]
    fn data_loc_char_is_dynamic_text() {
        let text = event(
            "kmem_cache_free",
            656,
            "\tfield:unsigned long call_site;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * ptr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;\n",
        );
        let f = parse_format("kmem", "kmem_cache_free", &text).unwrap();
        let dynamic: Vec<_> =
            f.dynamic_fields().map(|f| (f.name.as_str(), f.c_type.as_str(), f.kind, f.offset)).collect();
        assert_eq!(dynamic, [("name", "__data_loc char[]", DynamicText, 24)]);
        assert_eq!(f.field("ptr").map(|f| (f.kind, f.size, f.c_type.as_str())), Some((Unsigned, 8, "const void *")));
    }

    #[test]
    fn arrays_locators_and_structs_get_their_kinds() {
        let f = parse_format("t", "mixed", &mixed()).unwrap();
        assert_eq!(
            layout(&f)[4..8],
            [
                ("mac", Array, 8, 6, 6),
                ("comm", Text, 14, 16, 16),
                ("args", Array, 32, 48, 6),
                ("inos", Array, 80, 24, 3)
            ]
        );
        assert_eq!(
            layout(&f)[8..],
            [
                ("stack", DynamicBytes, 104, 4, 1),
                ("path", DynamicText, 108, 4, 1),
                ("ok", Unsigned, 112, 1, 1),
                ("addr", Array, 116, 16, 16)
            ]
        );
        assert!(f.field("path").unwrap().relative && !f.field("stack").unwrap().relative);
    }

    #[test]
    fn bad_formats_are_refused_with_the_line() {
        let field = |decl: &str| event("e", 1, &format!("\tfield:{decl};\n"));
        let cases = [
            (field("int x;\toffset:8;\tsize:0"), "line 9: field `int x` has size 0"),
            (field("int x;\toffset:8;\tsize:65536"), "line 9: size `65536` is not a number up to 65535"),
            (field("int x;\toffset:70000;\tsize:4"), "line 9: offset `70000` is not a number up to 65535"),
            (field("__data_loc char[] x;\toffset:8;\tsize:8"), "`x`: a `__data_loc char[]` locator takes 4 bytes"),
            (field("u32 x[3];\toffset:8;\tsize:10"), "cannot split 10 bytes into `u32` elements"),
            (field("u32 x[3];\toffset:8;\tsize:8"), "8 bytes hold 2 `u32` elements, not 3"),
            (field("int common_pid;\toffset:8;\tsize:4"), "field `common_pid` appears twice"),
            (field("x;\toffset:8;\tsize:4"), "cannot split `x` into a type and a name"),
            (event("e", 1, "garbage\n"), "line 9: unexpected `garbage`"),
            (event("other", 1, ""), "line 1: it describes event `other`"),
            ("name: e\nformat:\n".into(), "line 2: no `ID:` line"),
        ];
        for (text, want) in cases {
            let e = parse_format("c", "e", &text).unwrap_err().to_string();
            assert!(e.starts_with("bad format file for c:e at line ") && e.contains(want), "{e}\nwanted: {want}");
        }
    }

    #[test]
    fn random_and_mutated_formats_never_panic() {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let pieces = "field:|offset:|size:|signed:1|;|\t|\n| |[|]|[]|*|char|u64|é|0|4|65536|99999999999999999999";
        let pieces: Vec<&str> = pieces.split('|').chain(["__data_loc ", "__rel_loc ", "ID: 7", "print fmt:"]).collect();
        let seeds = [("signal_generate", signal_generate()), ("sched_switch", sched_switch()), ("mixed", mixed())];
        let mut parsed = 0;
        for _ in 0..20_000 {
            let (name, mut text) = seeds[next(seeds.len())].clone();
            for _ in 0..1 + next(4) {
                let mut at = next(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let end = text[at..].find(['\t', ';', '\n']).map_or(text.len(), |i| at + i);
                match next(3) {
                    0 => text.insert_str(at, pieces[next(pieces.len())]),
                    1 => text.truncate(at),
                    _ => text.replace_range(at..end, ""),
                }
            }
            let Ok(f) = parse_format("c", name, &text) else { continue };
            parsed += 1;
            for x in &f.fields {
                assert!(x.offset <= 65535 && (1..=65535).contains(&x.size), "{x:?}");
                assert!(x.count >= 1 && x.size % x.count == 0, "{x:?}");
                assert!(!matches!(x.kind, DynamicText | DynamicBytes) || x.size == 4, "{x:?}");
            }
        }
        assert!(parsed > 2_000, "only {parsed} mutants parsed: the mutations are too destructive to test much");
    }

    #[test]
    fn events_glob_and_lookup_suggests_near_names_in_a_fixture_tree() {
        let root = std::env::temp_dir().join(format!("wasmtap-tracefs-{}", std::process::id()));
        let tree = [
            ("signal", "signal_generate", signal_generate()),
            ("sched", "sched_switch", sched_switch()),
            ("ftrace", "function", String::new()),
        ];
        for (category, name, text) in tree {
            std::fs::create_dir_all(root.join("events").join(category).join(name)).unwrap();
            std::fs::write(root.join("events").join(category).join(name).join("format"), text).unwrap();
        }
        std::fs::write(root.join("events/sched/enable"), "0\n").unwrap();
        let names =
            |pattern| events(&root, pattern).unwrap().into_iter().map(|(c, n)| format!("{c}:{n}")).collect::<Vec<_>>();
        assert_eq!(names(""), ["sched:sched_switch", "signal:signal_generate"]);
        assert_eq!(
            (names("*:*gen*"), names("s?hed:*")),
            (vec!["signal:signal_generate".to_string()], vec!["sched:sched_switch".to_string()])
        );
        let error = |c, n| lookup(&root, c, n).unwrap_err().to_string();
        assert_eq!(
            error("signal", "signal_generat"),
            "unknown tracepoint `signal:signal_generat` (did you mean `signal:signal_generate`?)"
        );
        assert_eq!(
            error("shed", "sched_switch"),
            "tracepoint category `shed` does not exist (did you mean `sched:sched_switch`?)"
        );
        assert_eq!(error("foo", "bar"), "tracepoint category `foo` does not exist");
        assert_eq!(error("..", "signal"), "unknown tracepoint `..:signal`");
        assert_eq!(
            lookup(&root, "sched", "sched_switch").unwrap(),
            parse_format("sched", "sched_switch", &sched_switch()).unwrap()
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// tracefs at [`ROOT`], or `None` after saying why the live checks cannot run (in CI they fail).
    fn live() -> Option<&'static Path> {
        ensure_mounted();
        if Path::new(ROOT).join("events/signal/signal_generate/format").exists() {
            return Some(Path::new(ROOT));
        }
        assert!(std::env::var_os("CI").is_none(), "tracefs is not readable at {ROOT}; CI runs these tests as root");
        eprintln!("SKIPPED: tracefs is not readable at {ROOT} (run as root to check this kernel's formats)");
        None
    }

    #[test]
    fn live_signal_generate_agrees_with_a_naive_split_of_its_format_file() {
        let Some(root) = live() else { return };
        let format = read_format(root, "signal", "signal_generate").unwrap();
        let text = std::fs::read_to_string(root.join("events/signal/signal_generate/format")).unwrap();
        let naive = text.lines().filter_map(|l| l.strip_prefix("\tfield:")).map(|l| {
            let parts: Vec<&str> = l.split(';').collect();
            let value = |i: usize| parts[i].split(':').nth(1).unwrap().parse::<u32>().unwrap();
            let name = parts[0].rsplit(' ').next().unwrap().split('[').next().unwrap();
            (name.to_string(), value(1), value(2), value(3) == 1)
        });
        let parsed = format.fields.iter().map(|f| (f.name.clone(), f.offset, f.size, f.signed));
        assert_eq!(parsed.collect::<Vec<_>>(), naive.collect::<Vec<_>>());
        assert!(text.contains(&format!("\nID: {}\n", format.id)));
    }

    #[test]
    fn live_every_tracepoint_on_this_kernel_parses() {
        let Some(root) = live() else { return };
        let all = events(root, "*").unwrap();
        let failures: Vec<String> =
            all.iter().filter_map(|(c, n)| read_format(root, c, n).err()).map(|e| e.to_string()).collect();
        assert!(all.len() > 100 && failures.is_empty(), "{} tracepoints; {failures:#?}", all.len());
        assert!(events(root, "sched:sched_sw*").unwrap().contains(&("sched".into(), "sched_switch".into())));
        let e = lookup(root, "signal", "signal_generat").unwrap_err().to_string();
        assert_eq!(e, "unknown tracepoint `signal:signal_generat` (did you mean `signal:signal_generate`?)");
    }
}
