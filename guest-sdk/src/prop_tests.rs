//! Property tests of the event views: what a collector wrote reads back through the
//! typed accessors, and any batch at all reads as zeros and `None`s, never a panic.
//! `fuzz/fuzz_targets/records.rs` runs `touch` over fuzzed batches.

use proptest::prelude::*;
use wasmtap_abi::{header, tracepoint as tp, Records};

use crate::test_records::{self as t, put};
use crate::{Event, Field, FieldRef, FieldType, FieldValue, Value};

const FIELD_TYPES: [FieldType; 6] = [
    FieldType::Signed,
    FieldType::Unsigned,
    FieldType::Text,
    FieldType::DynamicText,
    FieldType::DynamicBytes,
    FieldType::Array,
];

fn field(kind: FieldType, offset: u32, size: u32, count: u32, signed: bool) -> Field {
    Field { name: "f".into(), c_type: "t".into(), kind, offset, size, count, signed }
}

/// Every accessor of every event in `batch`, plus `fields` read from each tracepoint;
/// returns the events seen.
pub(crate) fn touch(batch: &[u8], fields: &[Field]) -> usize {
    let mut n = 0;
    for ev in Records::new(batch).filter_map(Event::new) {
        n += 1;
        let _ = (ev.kind(), ev.sub(), ev.ts_ns(), ev.pid(), ev.tid(), ev.uid(), ev.gid(), ev.cgroup_id());
        let _ = (ev.comm(), ev.comm_key().to_string(), ev.stacks().is_some(), ev.stack());
        match ev {
            Event::SysEnter(s) => {
                let _ = (s.id(), s.name(), s.args(), s.arg(6), s.syscall().to_string());
            }
            Event::SysExit(s) => {
                let _ = (s.id(), s.name(), s.ret());
            }
            Event::Exec(e) => {
                let (args, joined) = (e.args().count(), e.args_joined());
                assert!(args <= ev.record().bytes().len() && joined.len() <= 3 * ev.record().bytes().len());
                let _ = (e.ppid(), e.ret(), e.argc(), e.truncated());
            }
            Event::Fork(f) => {
                let _ = (f.child_pid(), f.child_tid(), f.is_thread());
            }
            Event::Exit(x) => {
                let _ = (x.exit_code(), x.code(), x.signal(), x.core_dumped(), x.ppid(), x.start_ns());
                let _ = (x.cpu_ns(), x.user_sys_ns());
            }
            Event::Open(o) => {
                let len = ev.record().bytes().len();
                assert!(o.path_bytes().len() <= len && o.base_names().map(<[u8]>::len).sum::<usize>() <= len);
                assert!(o.full_path().len() <= 4 * len + 8);
                let _ = (o.syscall(), o.dfd(), o.flags(), o.mode(), o.ret(), o.latency_ns(), o.path_truncated());
            }
            Event::User(u) => {
                assert!(u.nargs() <= wasmtap_abi::user::ARGS_MAX);
                let _ = (u.probe(), u.ip(), u.arg(0), u.arg(usize::MAX), u.is_return(), u.retval(), u.arg_named("x"));
            }
            Event::Sample(s) => {
                let _ = (s.event(), s.cpu(), s.addr(), s.ip());
            }
            Event::Tracepoint(tp) => {
                let data = tp.data();
                assert!(data.len() <= tp::DATA_MAX && data.len() + tp::DATA <= ev.record().bytes().len());
                let _ = (tp.event_id(), tp.truncated(), tp.u64("x"), tp.str("x"));
                let sub = u32::from(ev.sub());
                for f in fields {
                    let r = FieldRef::new(sub, f);
                    assert_eq!(tp.get(&r), r.decode(data));
                    let _ = r.decode(data).map(|v| (v.to_string(), Value::from(v)));
                }
            }
        }
    }
    n
}

fn field_strategy() -> impl Strategy<Value = Field> {
    let kind = prop::sample::select(FIELD_TYPES.to_vec());
    let small = prop_oneof![0u32..80, any::<u32>()];
    (kind, small.clone(), small.clone(), small, any::<bool>())
        .prop_map(|(kind, offset, size, count, signed)| field(kind, offset, size, count, signed))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn exec_args_read_back_as_written(argv in prop::collection::vec(prop::collection::vec(1u8..=255, 0..24), 0..10)) {
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let b = t::exec(7, -2, &refs);
        let Some(Event::Exec(e)) = Records::new(&b).next().and_then(Event::new) else { panic!("an exec") };
        prop_assert_eq!(e.args().collect::<Vec<_>>(), refs);
        prop_assert_eq!((e.argc() as usize, e.ret()), (argv.len(), -2));
        let joined: Vec<String> = argv.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        prop_assert_eq!(e.args_joined(), joined.join(" "));
    }

    #[test]
    fn tracepoint_fields_read_back_as_written(
        offset in 0u32..64,
        size in prop::sample::select(vec![1u32, 2, 4, 8]),
        value in any::<u64>(),
        signed in any::<bool>(),
        text in "[a-z]{0,15}",
        stacks in prop::option::of((prop::collection::vec(any::<u64>(), 0..4), prop::collection::vec(any::<u64>(), 0..4))),
    ) {
        // An integer at `offset`, a `char[16]` after it, then a located string.
        let (text_at, loc_at, dyn_at) = (offset + size, offset + size + 16, offset + size + 20);
        let mut data = vec![0u8; (dyn_at as usize) + text.len() + 1];
        put(&mut data, offset as usize, &value.to_le_bytes()[..size as usize]);
        put(&mut data, text_at as usize, text.as_bytes());
        let locator = ((text.len() as u32 + 1) << 16) | dyn_at;
        put(&mut data, loc_at as usize, &locator.to_le_bytes());
        put(&mut data, dyn_at as usize, text.as_bytes());
        let mut b = t::tracepoint(1, 3, 99, &data);
        if let Some((k, u)) = &stacks {
            b = t::with_stacks(b, k, u);
        }
        let Some(Event::Tracepoint(tp)) = Records::new(&b).next().and_then(Event::new) else { panic!("a tracepoint") };
        prop_assert_eq!(tp.data(), &data[..]);
        let kind = if signed { FieldType::Signed } else { FieldType::Unsigned };
        let bits = 8 * size;
        let want = if bits == 64 { value } else { value & ((1 << bits) - 1) };
        let want = if signed && bits < 64 && want >> (bits - 1) == 1 { want | !((1 << bits) - 1) } else { want };
        let got = tp.get(&FieldRef::new(3, &field(kind, offset, size, 1, signed))).and_then(|v| v.as_u64());
        prop_assert_eq!(got, Some(want));
        let text_field = tp.get(&FieldRef::new(3, &field(FieldType::Text, text_at, 16, 16, false)));
        prop_assert_eq!(text_field, Some(FieldValue::Text(text.as_str().into())));
        let located = tp.get(&FieldRef::new(3, &field(FieldType::DynamicText, loc_at, 4, 1, false)));
        prop_assert_eq!(located, Some(FieldValue::Text(text.as_str().into())));
        // A handle of another subscription reads nothing.
        prop_assert_eq!(tp.get(&FieldRef::new(4, &field(kind, offset, size, 1, signed))), None);
    }

    #[test]
    fn any_field_of_any_entry_reads_inside_the_entry_or_not_at_all(
        data in prop::collection::vec(any::<u8>(), 0..128),
        f in field_strategy(),
    ) {
        let r = FieldRef::new(0, &f);
        if let Some(v) = r.decode(&data) {
            let end = u64::from(f.offset) + u64::from(f.size);
            let in_place = !matches!(f.kind, FieldType::DynamicText | FieldType::DynamicBytes);
            prop_assert!(!in_place || end <= data.len() as u64, "{f:?} read past {} bytes", data.len());
            let _ = (v.to_string(), v.as_i64(), v.as_u64(), v.as_str().map(str::len), Value::from(v));
        }
    }

    #[test]
    fn any_batch_reads_without_panicking(
        batch in prop::collection::vec(any::<u8>(), 0..1024),
        fields in prop::collection::vec(field_strategy(), 0..4),
    ) {
        touch(&batch, &fields);
    }

    #[test]
    fn corrupted_records_of_every_kind_read_without_panicking(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        fields in prop::collection::vec(field_strategy(), 0..4),
    ) {
        let mut batch: Vec<u8> = [
            t::sys_enter(1, 257, [1; 6]),
            t::exec(2, 0, &[b"ls", b"-l"]),
            t::fork(3, 4, 4, 0),
            t::exit(3, 0, 5, 0),
            t::with_stacks(t::tracepoint(1, 0, 7, &[1; 20]), &[1, 2], &[3]),
            t::with_stacks(t::user(1, 0, 0x1000, &[1, 2], 0), &[], &[4]),
            t::sample(1, 0, 0, 0, 0),
        ]
        .concat();
        // Kind and size stay intact, so every corrupt body gets read.
        let starts: Vec<usize> = Records::new(&batch).map(|r| r.bytes().as_ptr() as usize - batch.as_ptr() as usize).collect();
        for (at, byte) in edits {
            let i = at.index(batch.len());
            if !starts.iter().any(|s| (s + header::KIND..s + header::SIZE + 2).contains(&i)) {
                batch[i] = byte;
            }
        }
        prop_assert_eq!(Records::new(&batch).count(), starts.len());
        touch(&batch, &fields);
    }
}
