//! `recording::Reader` over any file: `open`, `peek_trailer`, then `next_chunk` to the
//! end, as `wasmtap replay` reads. With the first byte odd, the input follows a valid
//! magic, version and header, so the fuzzer spends its time on frames and records.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use wasmtap::collect::recording::{Header, Reader, RecordingError, Trailer, Writer};

/// A file in shared memory, one per fuzzing process.
fn path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm".into() } else { std::env::temp_dir() };
        dir.join(format!("wasmtap-fuzz-recording-{}", std::process::id()))
    })
}

/// Magic, version and a valid header, as `Writer` writes them.
fn valid_start() -> &'static [u8] {
    static START: OnceLock<Vec<u8>> = OnceLock::new();
    START.get_or_init(|| {
        let header = Header { layout_version: wasmtap_abi::LAYOUT_VERSION, ..Header::default() };
        // The writer never overwrites: clear a file an earlier process with this pid left.
        let _ = std::fs::remove_file(path());
        Writer::create(path(), &header).unwrap().finish(&Trailer::default()).unwrap();
        let mut bytes = std::fs::read(path()).unwrap();
        bytes.truncate(bytes.len() - 5 - serde_json::to_vec(&Trailer::default()).unwrap().len());
        bytes
    })
}

fn read_all() -> Result<(), RecordingError> {
    let mut r = Reader::open(path())?;
    let peeked = r.peek_trailer();
    while let Some(chunk) = r.next_chunk()? {
        let mut used = 0;
        for rec in wasmtap_abi::Records::new(&chunk.bytes) {
            used += rec.bytes().len();
        }
        assert_eq!(used, chunk.bytes.len(), "a chunk the reader accepts is whole records");
        assert_eq!(chunk.records, wasmtap_abi::Records::new(&chunk.bytes).count() as u64);
    }
    let trailer = r.trailer().expect("a trailer once next_chunk says None");
    assert_eq!(peeked.as_ref().ok(), Some(trailer), "peek_trailer agrees with reading to the end");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let file = if mode & 1 == 1 { [valid_start(), rest].concat() } else { rest.to_vec() };
    std::fs::write(path(), &file).unwrap();
    if let Err(e) = read_all() {
        let message = e.to_string();
        assert!(message.contains(&path().display().to_string()), "{message}");
        if let RecordingError::Corrupt { offset, .. } = e {
            assert!(offset <= file.len() as u64, "{message}: offset past the end ({} bytes)", file.len());
        }
    }
});
