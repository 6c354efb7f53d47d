//! Event sources: a replay yields the recording's chunks on the recording's clock, and a
//! tee on it writes a recording that reads back the same.

use std::path::{Path, PathBuf};

use wasmtap::collect::recording::{Reader, Writer};
use wasmtap::collect::source::{EventSource, Next, Replay};
use wasmtap::pipeline::Tee;

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(name)
}

/// Every chunk of `source` until it ends, with the clock as each was handed out.
fn drain(source: &mut dyn EventSource) -> Vec<(Vec<u8>, u64, u64)> {
    let mut chunks = Vec::new();
    loop {
        match source.next().unwrap() {
            Next::Chunk(c) => chunks.push((c.bytes, c.records, source.clock().mono_ns())),
            Next::Idle => panic!("a recording is never idle"),
            Next::End => return chunks,
        }
    }
}

#[test]
fn a_replay_walks_the_recordings_time_and_ends_at_its_trailer() {
    let reader = Reader::open(&golden("syscalls.wtrec")).unwrap();
    let (started, ended) = (reader.header.started_mono_ns, reader.peek_trailer().unwrap().ended_mono_ns);
    let mut replay = Replay::new(reader);
    assert_eq!(replay.clock().mono_ns(), started);
    let chunks = drain(&mut replay);
    assert!(!chunks.is_empty());
    let mut last = started;
    for (bytes, _, now) in &chunks {
        let first = wasmtap_abi::Records::new(bytes).next().unwrap().ts_ns();
        assert!(*now >= first.max(last), "the clock stands at or after the chunk's first record");
        last = *now;
    }
    assert_eq!(replay.clock().mono_ns(), ended.max(last));
    assert!(matches!(replay.next().unwrap(), Next::End), "an ended source stays ended");
    let end = replay.finish().unwrap();
    assert_eq!(end.kernel, Reader::open(&golden("syscalls.wtrec")).unwrap().peek_trailer().unwrap().counters);
}

#[test]
fn a_tee_on_a_replay_writes_a_recording_that_reads_back_the_same() {
    for name in ["syscalls.wtrec", "profile.wtrec", "files.wtrec"] {
        let reader = Reader::open(&golden(name)).unwrap();
        let header = reader.header.clone();
        let want_trailer = reader.peek_trailer().unwrap();
        let dir = std::env::temp_dir().join(format!("wasmtap-tee-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join(name);
        let writer = Writer::new(std::fs::File::create(&copy).unwrap(), &copy, &header).unwrap();
        let mut replay = Replay::new(reader);
        let mut tee = Tee::new(&mut replay, writer, None);
        let seen = drain(&mut tee);
        tee.finish().unwrap();

        let mut again = Replay::new(Reader::open(&copy).unwrap());
        let read = drain(&mut again);
        assert_eq!(seen, read, "{name}: the tee's recording replays chunk for chunk, on the same clock");
        let trailer = Reader::open(&copy).unwrap().peek_trailer().unwrap();
        assert_eq!(trailer.counters, want_trailer.counters, "{name}");
        assert_eq!(trailer.ended_mono_ns, again.clock().mono_ns(), "{name}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
