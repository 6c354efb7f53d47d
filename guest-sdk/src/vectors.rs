//! The decoder's test table for every SDK (`guest-sdk/vectors.json`): records built by
//! [`test_records`](crate::test_records), each with what this SDK reads from it. The
//! other languages' SDKs (guest-sdk/python, guest-sdk/js) read the same records and must
//! agree field by field; the C SDK's decoders follow the same layout (docs/abi.md).
//!
//! The file is written from this SDK, so it cannot drift from it:
//! `WASMTAP_BLESS=1 cargo test -p wasmtap-sdk vectors` writes it again after a change.

use serde_json::{json, Map, Value};
use wasmtap_abi::{exec, header, Record};

use crate::test_records::{self as t, put};
use crate::{Event, Field, FieldRef, FieldType, FieldValue};

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vectors.json");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn field(name: &str, kind: FieldType, offset: u32, size: u32, count: u32, signed: bool) -> Field {
    Field { name: name.into(), c_type: String::new(), kind, offset, size, count, signed }
}

fn kind_name(k: FieldType) -> &'static str {
    match k {
        FieldType::Signed => "signed",
        FieldType::Unsigned => "unsigned",
        FieldType::Text => "text",
        FieldType::DynamicText => "dynamic-text",
        FieldType::DynamicBytes => "dynamic-bytes",
        FieldType::Array => "array",
    }
}

/// What this SDK reads from `bytes`: the header, the kind's own fields, the stacks, and
/// with a schema the tracepoint fields by name.
fn decode(bytes: &[u8], schema: &[Field]) -> Value {
    let ev = Event::new(Record::new(bytes)).expect("a record of a known kind");
    let mut m = Map::new();
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    set("ts_ns", json!(ev.ts_ns()));
    set("pid", json!(ev.pid()));
    set("tid", json!(ev.tid()));
    set("uid", json!(ev.uid()));
    set("gid", json!(ev.gid()));
    set("cgroup_id", json!(ev.cgroup_id()));
    set("comm", json!(ev.comm()));
    set("sub", json!(ev.sub()));
    set("flags", json!(ev.record().flags()));
    let stacks =
        ev.stacks().map(|(k, u)| json!({"kernel": k.iter().collect::<Vec<_>>(), "user": u.iter().collect::<Vec<_>>()}));
    set("stacks", stacks.unwrap_or(Value::Null));
    match ev {
        Event::SysEnter(e) => {
            set("kind", json!("sys_enter"));
            set("nr", json!(e.id()));
            set("name", json!(e.name()));
            set("args", json!(e.args()));
        }
        Event::SysExit(e) => {
            set("kind", json!("sys_exit"));
            set("nr", json!(e.id()));
            set("name", json!(e.name()));
            set("ret", json!(e.ret()));
        }
        Event::Exec(e) => {
            set("kind", json!("exec"));
            set("ppid", json!(e.ppid()));
            set("ret", json!(e.ret()));
            set("argc", json!(e.argc()));
            set("truncated", json!(e.truncated()));
            set("args", json!(e.args().map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>()));
        }
        Event::Fork(e) => {
            set("kind", json!("fork"));
            set("child_pid", json!(e.child_pid()));
            set("child_tid", json!(e.child_tid()));
            set("is_thread", json!(e.is_thread()));
        }
        Event::Exit(e) => {
            set("kind", json!("exit"));
            set("exit_code", json!(e.exit_code()));
            set("code", json!(e.code()));
            set("signal", json!(e.signal()));
            set("core_dumped", json!(e.core_dumped()));
            set("ppid", json!(e.ppid()));
            set("start_ns", json!(e.start_ns()));
            set("group_dead", json!(e.group_dead()));
            set("cpu_ns", json!(e.cpu_ns()));
            set("user_ns", json!(e.user_sys_ns().map(|p| p.0)));
            set("sys_ns", json!(e.user_sys_ns().map(|p| p.1)));
        }
        Event::Open(e) => {
            set("kind", json!("open"));
            set("nr", json!(e.syscall().nr()));
            set("name", json!(e.syscall().name()));
            set("dfd", json!(e.dfd()));
            set("flags_value", json!(e.flags()));
            set("flags_str", json!(wasmtap_syscalls::open_flags(e.flags())));
            set("mode", json!(e.mode()));
            set("ret", json!(e.ret()));
            set("errno", json!((e.ret() < 0).then(|| wasmtap_syscalls::errno_name(-e.ret())).flatten()));
            set("latency_ns", json!(e.latency_ns()));
            set("path", json!(e.path()));
            set("path_truncated", json!(e.path_truncated()));
            set("base_truncated", json!(e.base_truncated()));
            set("full_path", json!(e.full_path()));
        }
        Event::Tracepoint(e) => {
            set("kind", json!("tracepoint"));
            set("event_id", json!(e.event_id()));
            set("truncated", json!(e.truncated()));
            set("data", json!(hex(e.data())));
            let mut fields = Map::new();
            for f in schema {
                let v = match FieldRef::new(u32::from(ev.sub()), f).decode(e.data()) {
                    None => Value::Null,
                    Some(FieldValue::Signed(v)) => json!(v),
                    Some(FieldValue::Unsigned(v)) => json!(v),
                    Some(FieldValue::Text(s)) => json!(s),
                    Some(FieldValue::Bytes(b)) => json!(hex(b)),
                    Some(FieldValue::Array(a)) => {
                        json!((0..a.len())
                            .map(|i| if a.is_signed() { json!(a.get_i64(i)) } else { json!(a.get(i)) })
                            .collect::<Vec<_>>())
                    }
                };
                fields.insert(f.name.clone(), v);
            }
            set("fields", Value::Object(fields));
        }
        Event::User(e) => {
            set("kind", json!("user"));
            set("probe", json!(e.probe()));
            set("ip", json!(e.ip()));
            set("nargs", json!(e.nargs()));
            set("args", json!((0..e.nargs()).map(|i| e.arg(i)).collect::<Vec<_>>()));
            set("is_return", json!(e.is_return()));
            set("retval", json!(e.retval()));
        }
        Event::Sample(e) => {
            set("kind", json!("sample"));
            set("event", json!(e.event()));
            set("cpu", json!(e.cpu()));
            set("addr", json!(e.addr()));
            set("ip", json!(e.ip()));
        }
    }
    Value::Object(m)
}

/// The records of the table, named, with the tracepoint schema some of them read.
fn cases() -> Vec<(&'static str, Vec<u8>, Vec<Field>)> {
    let none = Vec::new;
    let mut exec_cut = t::exec(40, 0, &[b"/bin/sh", b"-c", b"x"]);
    t::set_flags(&mut exec_cut, exec::FLAG_TRUNCATED);
    let mut bad_locator = vec![0u8; 16];
    put(&mut bad_locator, 8, &((200u32 << 16) | 12).to_le_bytes());
    // sched_process_fork-like entry: common fields, an in-place comm, a pid, a located
    // name, an array, located bytes.
    let mut entry = vec![0u8; 64];
    put(&mut entry, 0, &7u16.to_le_bytes());
    put(&mut entry, 8, b"parent\0\0\0\0\0\0\0\0\0\0");
    put(&mut entry, 24, &(-5i32).to_le_bytes());
    put(&mut entry, 28, &((6u32 << 16) | 48).to_le_bytes());
    put(&mut entry, 32, &[1, 2, 0xff, 0xfe]);
    put(&mut entry, 36, &((3u32 << 16) | 54).to_le_bytes());
    put(&mut entry, 40, &u64::MAX.to_le_bytes());
    put(&mut entry, 48, b"child\0");
    put(&mut entry, 54, &[9, 8, 7]);
    let schema = vec![
        field("common_type", FieldType::Unsigned, 0, 2, 1, false),
        field("comm", FieldType::Text, 8, 16, 1, false),
        field("pid", FieldType::Signed, 24, 4, 1, true),
        field("name", FieldType::DynamicText, 28, 4, 1, false),
        field("small", FieldType::Array, 32, 4, 4, true),
        field("usmall", FieldType::Array, 32, 4, 2, false),
        field("blob", FieldType::DynamicBytes, 36, 4, 1, false),
        field("big", FieldType::Unsigned, 40, 8, 1, false),
        field("past_end", FieldType::Unsigned, 60, 8, 1, false),
        field("odd_size", FieldType::Unsigned, 0, 3, 1, false),
    ];
    let cut_schema = vec![field("loc", FieldType::DynamicText, 8, 4, 1, false)];
    let mut old_exit = t::exit(9, 9, 5, 0);
    old_exit.truncate(wasmtap_abi::exit::SIZE_WITHOUT_CPU);
    put(&mut old_exit, header::SIZE, &(wasmtap_abi::exit::SIZE_WITHOUT_CPU as u16).to_le_bytes());
    vec![
        ("sys_enter openat", t::sys_enter(42, 257, [(-100i64) as u64, 0x1000, 0o2101, 0o644, 0, u64::MAX]), none()),
        ("sys_enter unknown number", t::sys_enter(42, 1000, [0; 6]), none()),
        ("sys_exit read", sys_exit(42, 0, 4096), none()),
        ("sys_exit failed", sys_exit(42, 2, -2), none()),
        ("exec", t::exec(40, 0, &[b"/usr/bin/ls", b"-l", b"/tmp"]), none()),
        ("exec, argv cut", exec_cut, none()),
        ("fork of a process", t::fork(10, 11, 11, 0), none()),
        ("fork of a thread", t::fork(10, 10, 12, 1), none()),
        ("exit by code 3", t::exit_cpu(9, 3 << 8, 5_000, 1, [7_000, 4_000, 2_000]), none()),
        ("exit by a signal with core", t::exit(9, 0x80 | 11, 5, 0), none()),
        ("exit of an older recording", old_exit, none()),
        ("open absolute", t::open(7, 257, b"/etc/passwd", 0o2000000 | 0o100, 3, &[]), none()),
        ("open relative, walked", t::open(7, 257, b"./x/../y", 0o1 | 0o100 | 0o1000, 4, &[b"tmp", b"home"]), none()),
        ("open of dot", t::open(7, 2, b".", 0o200000, 5, &[b"srv"]), none()),
        ("open failed", t::open(7, 2, b"missing", 0, -2, &[]), none()),
        ("open with unknown flag bits", t::open(7, 85, b"/o", 0o3 | (1 << 40), -13, &[]), none()),
        ("tracepoint with fields", t::tracepoint(5, 2, 311, &entry), schema),
        ("tracepoint with a bad locator", t::tracepoint(5, 0, 1, &bad_locator), cut_schema),
        (
            "tracepoint with stacks",
            t::with_stacks(
                t::tracepoint(5, 1, 312, &[1, 2, 3]),
                &[0xffff_ffff_8100_0000, 0xffff_ffff_8100_0010],
                &[0x40_1000],
            ),
            none(),
        ),
        ("uprobe", t::user(8, 0, 0x40_1234, &[1, 2, u64::MAX], 0), none()),
        ("uretprobe", t::user(8, 1, 0x40_1234, &[77], wasmtap_abi::user::FLAG_RETURN), none()),
        ("sample", t::with_stacks(t::sample(9, 0, 1, 0, 0x40_2000), &[], &[0x40_2000, 0x40_3000]), none()),
        ("page fault sample", t::sample(9, 2, 0, 0x7fff_0000, 0x40_2000), none()),
    ]
}

fn sys_exit(pid: u32, id: i64, ret: i64) -> Vec<u8> {
    let mut b = t::record(wasmtap_abi::Kind::SysExit, wasmtap_abi::sys_exit::SIZE, pid, b"cat");
    put(&mut b, wasmtap_abi::sys_exit::ID, &id.to_le_bytes());
    put(&mut b, wasmtap_abi::sys_exit::RET, &ret.to_le_bytes());
    b
}

fn table() -> String {
    let rows: Vec<Value> = cases()
        .into_iter()
        .map(|(name, bytes, schema)| {
            let schema: Vec<Value> = schema
                .iter()
                .map(|f| {
                    json!({"name": f.name, "kind": kind_name(f.kind), "offset": f.offset, "size": f.size,
                           "count": f.count, "signed": f.signed})
                })
                .collect();
            json!({"name": name, "record": hex(&bytes), "schema": schema, "expect": decode(&bytes, &cases_schema(&schema))})
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&json!({"format": 1, "records": rows})).expect("json");
    text.push('\n');
    text
}

/// The schema back from its JSON form (what the other SDKs read).
fn cases_schema(v: &[Value]) -> Vec<Field> {
    let kind = |s: &str| match s {
        "signed" => FieldType::Signed,
        "unsigned" => FieldType::Unsigned,
        "text" => FieldType::Text,
        "dynamic-text" => FieldType::DynamicText,
        "dynamic-bytes" => FieldType::DynamicBytes,
        _ => FieldType::Array,
    };
    v.iter()
        .map(|f| {
            let n = |k: &str| f[k].as_u64().expect("a number") as u32;
            field(
                f["name"].as_str().expect("a name"),
                kind(f["kind"].as_str().expect("a kind")),
                n("offset"),
                n("size"),
                n("count"),
                f["signed"] == true,
            )
        })
        .collect()
}

#[test]
fn vectors_json_is_what_this_sdk_decodes() {
    let want = table();
    if std::env::var_os("WASMTAP_BLESS").is_some() {
        std::fs::write(FILE, &want).expect("write vectors.json");
    }
    let have = std::fs::read_to_string(FILE).unwrap_or_default();
    assert!(have == want, "guest-sdk/vectors.json is stale: WASMTAP_BLESS=1 cargo test -p wasmtap-sdk vectors");
}
