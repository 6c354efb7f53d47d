//! Batches as `on-batch` receives them: `wasmtap_abi::Records` / `check_record`, then
//! every `Event` accessor of the SDK, and tracepoint fields read with layouts taken from
//! the input. The first byte says how many 13-byte field layouts precede the batch.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmtap_abi::{check_record, Records};
use wasmtap_sdk::{Event, Field, FieldRef, FieldType, Value};

const TYPES: [FieldType; 6] = [
    FieldType::Signed,
    FieldType::Unsigned,
    FieldType::Text,
    FieldType::DynamicText,
    FieldType::DynamicBytes,
    FieldType::Array,
];

fn layouts(data: &[u8]) -> (Vec<Field>, &[u8]) {
    let Some((&n, rest)) = data.split_first() else { return (Vec::new(), data) };
    let n = usize::from(n % 4).min(rest.len() / 13);
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let fields = rest[..13 * n]
        .chunks_exact(13)
        .map(|b| Field {
            name: "f".into(),
            c_type: "t".into(),
            kind: TYPES[usize::from(b[0]) % TYPES.len()],
            offset: u32_at(b, 1) % 4096,
            size: u32_at(b, 5) % 512,
            count: u32_at(b, 9) % 64,
            signed: b[0] & 0x80 != 0,
        })
        .collect();
    (fields, &rest[13 * n..])
}

fuzz_target!(|data: &[u8]| {
    let (fields, batch) = layouts(data);
    let mut used = 0;
    for rec in Records::new(batch) {
        let (_, size) = check_record(rec.bytes()).expect("Records yields checked records");
        assert_eq!(rec.bytes().as_ptr(), batch[used..].as_ptr(), "records are contiguous");
        used += size;
        let _ = (rec.sub(), rec.flags(), rec.ts_ns(), rec.pid(), rec.tid(), rec.uid(), rec.gid(), rec.cgroup_id());
        if let Some((k, u)) = rec.stacks() {
            assert!(k.len() <= 127 && u.len() <= 127);
            let _ = (k.iter().fold(0u64, u64::wrapping_add), u.iter().max(), k.get(0), u.get(usize::MAX / 8));
        }
        let Some(ev) = Event::new(rec) else { continue };
        let _ = (ev.comm().len(), ev.comm_key().to_string(), ev.stack(), ev.schema().is_some());
        match ev {
            Event::SysEnter(s) => {
                let _ = (s.args(), s.arg(7), s.syscall().to_string());
            }
            Event::SysExit(s) => {
                let _ = (s.name(), s.ret());
            }
            Event::Exec(e) => {
                assert!(e.args().count() <= size);
                let _ = (e.args_joined(), e.ppid(), e.ret(), e.argc(), e.truncated());
            }
            Event::Fork(f) => {
                let _ = (f.child_pid(), f.child_tid(), f.is_thread());
            }
            Event::Exit(x) => {
                let _ = (x.code(), x.signal(), x.core_dumped(), x.ppid(), x.start_ns(), x.group_dead());
            }
            Event::User(u) => {
                assert!(u.nargs() <= 12);
                let _ = (u.probe(), u.ip(), u.arg(11), u.arg(usize::MAX), u.retval(), u.arg_named("arg0"));
            }
            Event::Open(o) => {
                assert!(o.path_bytes().len() <= size);
                let _ = (o.syscall().to_string(), o.dfd(), o.flags(), o.mode(), o.ret(), o.latency_ns(), o.path());
            }
            Event::Sample(s) => {
                let _ = (s.event(), s.cpu(), s.addr(), s.ip());
            }
            Event::Tracepoint(tp) => {
                let entry = tp.data();
                assert!(entry.len() + 64 <= size);
                let _ = (tp.event_id(), tp.truncated(), tp.u64("x"), tp.str("x"));
                for f in &fields {
                    let r = FieldRef::new(u32::from(ev.sub()), f);
                    assert_eq!(tp.get(&r), r.decode(entry));
                    if let Some(v) = r.decode(entry) {
                        let _ = (v.to_string(), v.as_i64(), Value::from(v));
                    }
                }
            }
        }
    }
    assert!(used == batch.len() || check_record(&batch[used..]).is_err(), "stopped before a good record");
});
