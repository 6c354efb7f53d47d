//! Property tests of the batch decoder: records built field by field read back as
//! written, and any bytes at all decode to whole records or stop, never panic.
//! `fuzz/fuzz_targets/records.rs` explores the same ground for longer.

extern crate std;

use proptest::prelude::*;
use std::vec::Vec;

use super::*;

/// One record as a collector would write it, field by field.
#[derive(Clone, Debug)]
struct Spec {
    kind: Kind,
    sub: u16,
    flags: u16,
    ts_ns: u64,
    pid: u32,
    tid: u32,
    uid: u32,
    gid: u32,
    cgroup_id: u64,
    comm: Vec<u8>,
    /// Bytes after the header (whole 8-byte words), before any stack trailer.
    body: Vec<u8>,
    /// Kernel and user frames, for kinds that carry stacks.
    stacks: Option<(Vec<u64>, Vec<u64>)>,
}

impl Spec {
    fn encode(&self) -> Vec<u8> {
        let mut b = std::vec![0u8; HEADER_SIZE];
        let flags = if self.stacks.is_some() { self.flags | stack::FLAG } else { self.flags & !stack::FLAG };
        b[header::KIND..][..2].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[header::SUB..][..2].copy_from_slice(&self.sub.to_le_bytes());
        b[header::FLAGS..][..2].copy_from_slice(&flags.to_le_bytes());
        b[header::TS_NS..][..8].copy_from_slice(&self.ts_ns.to_le_bytes());
        b[header::PID..][..4].copy_from_slice(&self.pid.to_le_bytes());
        b[header::TID..][..4].copy_from_slice(&self.tid.to_le_bytes());
        b[header::UID..][..4].copy_from_slice(&self.uid.to_le_bytes());
        b[header::GID..][..4].copy_from_slice(&self.gid.to_le_bytes());
        b[header::CGROUP_ID..][..8].copy_from_slice(&self.cgroup_id.to_le_bytes());
        b[header::COMM..][..self.comm.len()].copy_from_slice(&self.comm);
        b.extend(&self.body);
        if let Some((kernel, user)) = &self.stacks {
            b.extend(kernel.iter().chain(user).flat_map(|f| f.to_le_bytes()));
            b.extend((kernel.len() as u16).to_le_bytes());
            b.extend((user.len() as u16).to_le_bytes());
            b.extend([0; 4]);
        }
        let size = b.len() as u16;
        b[header::SIZE..][..2].copy_from_slice(&size.to_le_bytes());
        b
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    let kind = prop::sample::select(Kind::ALL.to_vec());
    let ids = (any::<u16>(), any::<u16>(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>());
    let comm = prop::collection::vec(1u8..=255, 0..COMM_LEN);
    (kind, ids, any::<u64>(), comm, 0usize..8, any::<u64>())
        .prop_flat_map(|(kind, ids, cgroup_id, comm, extra_words, seed)| {
            let body_len = kind.min_size() - HEADER_SIZE + 8 * extra_words;
            let body = prop::collection::vec(any::<u8>(), body_len);
            let frames = prop::collection::vec(any::<u64>(), 0..6);
            let stacks =
                if kind.has_stacks() { prop::option::of((frames.clone(), frames)).boxed() } else { Just(None).boxed() };
            (Just((kind, ids, cgroup_id, comm, seed)), body, stacks)
        })
        .prop_map(|((kind, (sub, flags, ts_ns, pid, tid, uid, gid), cgroup_id, comm, _), body, stacks)| {
            let mut s = Spec { kind, sub, flags, ts_ns, pid, tid, uid, gid, cgroup_id, comm, body, stacks };
            // Keep the record within its kind's size.
            s.body.truncate(
                kind.max_size() - HEADER_SIZE - s.stacks.as_ref().map_or(0, |(k, u)| 8 * (k.len() + u.len() + 1)),
            );
            s.body.truncate(s.body.len() / 8 * 8);
            s
        })
        .prop_filter("fits its kind", |s| s.encode().len() >= s.kind.min_size())
}

/// Read every accessor of every record; return how many bytes the records covered.
fn touch_all(batch: &[u8]) -> usize {
    let mut used = 0;
    for r in Records::new(batch) {
        assert_eq!(r.bytes().as_ptr(), batch[used..].as_ptr(), "records are contiguous");
        let (kind, size) = check_record(r.bytes()).expect("yielded records are valid");
        assert_eq!((Some(kind), size), (r.kind(), r.bytes().len()));
        let _ = (r.sub(), r.flags(), r.ts_ns(), r.pid(), r.tid(), r.uid(), r.gid(), r.cgroup_id(), r.comm());
        if let Some((k, u)) = r.stacks() {
            assert!(k.len() <= stack::MAX_FRAMES && u.len() <= stack::MAX_FRAMES);
            let _ = (k.iter().count(), u.iter().count(), k.get(k.len()), u.get(usize::MAX / 8));
        }
        for off in (0..size + 9).chain([usize::MAX - 1]) {
            let _ = (r.u16_at(off), r.u32_at(off), r.i32_at(off), r.u64_at(off), r.i64_at(off));
        }
        used += size;
    }
    used
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn records_built_field_by_field_read_back_as_written(specs in prop::collection::vec(spec(), 0..12)) {
        let batch: Vec<u8> = specs.iter().flat_map(Spec::encode).collect();
        let got: Vec<Record<'_>> = Records::new(&batch).collect();
        prop_assert_eq!(got.len(), specs.len());
        for (r, s) in got.iter().zip(&specs) {
            prop_assert_eq!(r.kind(), Some(s.kind));
            prop_assert_eq!((r.sub(), r.ts_ns(), r.pid(), r.tid()), (s.sub, s.ts_ns, s.pid, s.tid));
            prop_assert_eq!((r.uid(), r.gid(), r.cgroup_id()), (s.uid, s.gid, s.cgroup_id));
            prop_assert_eq!(r.comm(), &s.comm[..]);
            prop_assert_eq!(r.slice(HEADER_SIZE, s.body.len()), Some(&s.body[..]));
            let stacks = r.stacks().map(|(k, u)| (k.iter().collect::<Vec<_>>(), u.iter().collect::<Vec<_>>()));
            prop_assert_eq!(&stacks, &s.stacks);
        }
        prop_assert_eq!(touch_all(&batch), batch.len());
    }

    #[test]
    fn any_bytes_decode_to_whole_records_then_stop(batch in prop::collection::vec(any::<u8>(), 0..1024)) {
        let used = touch_all(&batch);
        if used < batch.len() {
            prop_assert!(check_record(&batch[used..]).is_err(), "the batch stops only at a bad record");
        }
    }

    #[test]
    fn corrupted_batches_decode_or_stop_without_panicking(
        specs in prop::collection::vec(spec(), 1..6),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut batch: Vec<u8> = specs.iter().flat_map(Spec::encode).collect();
        for (at, byte) in edits {
            let i = at.index(batch.len());
            batch[i] = byte;
        }
        batch.truncate(cut.index(batch.len() + 1));
        let used = touch_all(&batch);
        prop_assert!(used == batch.len() || check_record(&batch[used..]).is_err());
    }

    #[test]
    fn check_record_errors_name_what_is_wrong(batch in prop::collection::vec(any::<u8>(), 0..256)) {
        let Err(e) = check_record(&batch) else { return Ok(()) };
        let raw = |at: usize| u16::from_le_bytes([batch[at], batch[at + 1]]);
        match e {
            RecordError::Short => prop_assert!(batch.len() < HEADER_SIZE),
            RecordError::UnknownKind(k) => prop_assert!(k == raw(0) && Kind::from_u16(k).is_none()),
            RecordError::BadSize { kind, size } => {
                prop_assert_eq!((kind, size), (raw(0), raw(2)));
                let k = Kind::from_u16(kind).unwrap();
                let s = usize::from(size);
                prop_assert!(s < k.min_size() || s > k.max_size() || s % 8 != 0 || s > batch.len());
            }
        }
    }
}
