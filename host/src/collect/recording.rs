//! The recording file: what `wasmtap record` writes and `wasmtap replay` reads.
//!
//! ```text
//! "WASMTAP-REC\n"  u32 version  u32 len  JSON header
//! frames: u8 tag, u32 len, payload
//!   tag 1: a chunk of records (wasmtap-abi layout), checked record by record on read
//!   tag 2: JSON trailer (end time, kernel counters); must be last
//! ```
//! Every length read from the file is checked against a cap before allocating, and a
//! corrupt file yields an error naming the byte offset, never a panic.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Chunk;
use crate::accounting::KernelCounters;

const MAGIC: &[u8; 12] = b"WASMTAP-REC\n";
const VERSION: u32 = 1;
const TAG_CHUNK: u8 = 1;
const TAG_TRAILER: u8 = 2;
const MAX_JSON: u32 = 64 << 20;
const MAX_CHUNK: u32 = 64 << 20;

/// Facts about the recorded run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub layout_version: u32,
    /// Wall-clock minus monotonic nanoseconds at the start.
    pub wall_offset_ns: i128,
    pub started_mono_ns: u64,
    /// Probes subscribed when recording.
    pub probes: Vec<String>,
    /// How they were resolved: tracepoint formats, uprobe sites, argument names.
    #[serde(default)]
    pub table: super::table::ProbeTable,
    pub hostname: String,
    pub kernel: String,
}

/// Written at the end of a recording.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Trailer {
    pub ended_mono_ns: u64,
    pub counters: KernelCounters,
    /// Every address of a recorded stack, symbolized while the processes ran.
    #[serde(default)]
    pub symbols: Vec<SymbolEntry>,
}

/// One symbolized address of a recording's stacks.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SymbolEntry {
    /// The process (0 for kernel addresses).
    pub pid: u32,
    pub kernel: bool,
    pub frame: crate::symbolize::Frame,
}

/// Why a recording could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("cannot open recording {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Create(#[from] crate::private::PrivateFileError),
    #[error("cannot write recording {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a wasmtap recording (bad magic)")]
    NotARecording { path: PathBuf },
    #[error("corrupt recording {path} at byte {offset}: {reason}")]
    Corrupt { path: PathBuf, offset: u64, reason: String },
    /// A live source in another process failed (a tenant's collectors).
    #[error("{0}")]
    Collectors(String),
}

/// Writes a recording.
pub struct Writer {
    out: BufWriter<File>,
    path: PathBuf,
}

impl Writer {
    /// Create `path`, private (see [`crate::private`]), and write the header.
    pub fn create(path: &Path, header: &Header) -> Result<Writer, RecordingError> {
        Writer::new(crate::private::create("recording", path)?, path, header)
    }

    /// Write the header to `file`, a new recording at `path`.
    pub fn new(file: File, path: &Path, header: &Header) -> Result<Writer, RecordingError> {
        let mut w = Writer { out: BufWriter::with_capacity(1 << 20, file), path: path.into() };
        let json = serde_json::to_vec(header).expect("header serializes");
        w.put(MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&(json.len() as u32).to_le_bytes())?;
        w.put(&json)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), RecordingError> {
        self.out.write_all(bytes).map_err(|source| RecordingError::Write { path: self.path.clone(), source })
    }

    fn frame(&mut self, tag: u8, payload: &[u8]) -> Result<(), RecordingError> {
        self.put(&[tag])?;
        self.put(&(payload.len() as u32).to_le_bytes())?;
        self.put(payload)
    }

    /// Append a chunk of records.
    pub fn chunk(&mut self, chunk: &Chunk) -> Result<(), RecordingError> {
        if chunk.bytes.is_empty() {
            return Ok(());
        }
        self.frame(TAG_CHUNK, &chunk.bytes)
    }

    /// Write the trailer and flush.
    pub fn finish(mut self, trailer: &Trailer) -> Result<(), RecordingError> {
        let json = serde_json::to_vec(trailer).expect("trailer serializes");
        self.frame(TAG_TRAILER, &json)?;
        self.out.flush().map_err(|source| RecordingError::Write { path: self.path.clone(), source })
    }
}

/// Reads a recording chunk by chunk.
pub struct Reader {
    input: BufReader<File>,
    path: PathBuf,
    offset: u64,
    pub header: Header,
    trailer: Option<Trailer>,
}

impl Reader {
    /// Open `path` and read its header.
    pub fn open(path: &Path) -> Result<Reader, RecordingError> {
        let file = File::open(path).map_err(|source| RecordingError::Open { path: path.into(), source })?;
        let mut r = Reader {
            input: BufReader::with_capacity(1 << 20, file),
            path: path.into(),
            offset: 0,
            header: Header::default(),
            trailer: None,
        };
        let mut magic = [0u8; 12];
        if r.input.read_exact(&mut magic).is_err() || &magic != MAGIC {
            return Err(RecordingError::NotARecording { path: path.into() });
        }
        r.offset = 12;
        let version = r.u32("format version")?;
        if version != VERSION {
            return Err(r.corrupt(format!("format version {version}, this wasmtap reads {VERSION}")));
        }
        let len = r.u32("header length")?;
        if len > MAX_JSON {
            return Err(r.corrupt(format!("header of {len} bytes is larger than {MAX_JSON}")));
        }
        let json = r.bytes(len as usize, "header")?;
        r.header = serde_json::from_slice(&json).map_err(|e| r.corrupt(format!("bad header: {e}")))?;
        if r.header.layout_version != wasmtap_abi::LAYOUT_VERSION {
            return Err(r.corrupt(format!(
                "event layout {} (this wasmtap reads {})",
                r.header.layout_version,
                wasmtap_abi::LAYOUT_VERSION
            )));
        }
        Ok(r)
    }

    /// The next chunk, or `None` after the trailer.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk>, RecordingError> {
        if self.trailer.is_some() {
            return Ok(None);
        }
        let frame_at = self.offset;
        let mut tag = [0u8; 1];
        if self.input.read_exact(&mut tag).is_err() {
            return Err(self.corrupt("file ends without a trailer (recording cut short?)".into()));
        }
        self.offset += 1;
        let len = self.u32("frame length")?;
        match tag[0] {
            TAG_CHUNK if len <= MAX_CHUNK => {
                let bytes = self.bytes(len as usize, "chunk")?;
                let records = check_chunk(&bytes).map_err(|(at, reason)| RecordingError::Corrupt {
                    path: self.path.clone(),
                    offset: frame_at + 5 + at as u64,
                    reason,
                })?;
                Ok(Some(Chunk { bytes, records }))
            }
            TAG_CHUNK => Err(self.corrupt(format!("chunk of {len} bytes is larger than {MAX_CHUNK}"))),
            TAG_TRAILER if len <= MAX_JSON => {
                let json = self.bytes(len as usize, "trailer")?;
                let t = serde_json::from_slice(&json).map_err(|e| self.corrupt(format!("bad trailer: {e}")))?;
                self.trailer = Some(t);
                Ok(None)
            }
            TAG_TRAILER => Err(self.corrupt(format!("trailer of {len} bytes is larger than {MAX_JSON}"))),
            t => Err(RecordingError::Corrupt {
                path: self.path.clone(),
                offset: frame_at,
                reason: format!("unknown frame tag {t}"),
            }),
        }
    }

    /// Read the trailer without consuming the chunks: skips frame by frame from the
    /// current position in a second handle. Errors like `next_chunk` would.
    pub fn peek_trailer(&self) -> Result<Trailer, RecordingError> {
        use std::io::{Seek, SeekFrom};
        let mut f =
            File::open(&self.path).map_err(|source| RecordingError::Open { path: self.path.clone(), source })?;
        let mut at = self.offset;
        let corrupt = |offset, reason: String| RecordingError::Corrupt { path: self.path.clone(), offset, reason };
        let file_len = f.metadata().map_err(|e| corrupt(at, e.to_string()))?.len();
        loop {
            f.seek(SeekFrom::Start(at)).map_err(|e| corrupt(at, e.to_string()))?;
            let mut head = [0u8; 5];
            f.read_exact(&mut head)
                .map_err(|_| corrupt(at, "file ends without a trailer (recording cut short?)".into()))?;
            let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
            // Name the frame that runs past the end, not an offset past the end.
            let cut_short = |what: &str| {
                let got = file_len.saturating_sub(at + 5);
                corrupt(file_len, format!("file ends inside the {what} ({got} of {len} bytes)"))
            };
            match head[0] {
                TAG_CHUNK if len <= MAX_CHUNK && at + 5 + u64::from(len) > file_len => return Err(cut_short("chunk")),
                TAG_CHUNK if len <= MAX_CHUNK => at += 5 + u64::from(len),
                TAG_TRAILER if len <= MAX_JSON && at + 5 + u64::from(len) > file_len => {
                    return Err(cut_short("trailer"))
                }
                TAG_TRAILER if len <= MAX_JSON => {
                    let mut json = vec![0u8; len as usize];
                    f.read_exact(&mut json).map_err(|_| corrupt(at + 5, "trailer cut short".into()))?;
                    return serde_json::from_slice(&json).map_err(|e| corrupt(at + 5, format!("bad trailer: {e}")));
                }
                t => return Err(corrupt(at, format!("bad frame (tag {t}, {len} bytes)"))),
            }
        }
    }

    /// The trailer, once `next_chunk` has returned `None`.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    fn corrupt(&self, reason: String) -> RecordingError {
        RecordingError::Corrupt { path: self.path.clone(), offset: self.offset, reason }
    }

    fn u32(&mut self, what: &str) -> Result<u32, RecordingError> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self, n: usize, what: &str) -> Result<Vec<u8>, RecordingError> {
        let mut buf = Vec::new();
        let got = (&mut self.input)
            .take(n as u64)
            .read_to_end(&mut buf)
            .map_err(|e| self.corrupt(format!("reading {what}: {e}")))?;
        if got != n {
            return Err(self.corrupt(format!("file ends inside the {what} ({got} of {n} bytes)")));
        }
        self.offset += n as u64;
        Ok(buf)
    }
}

/// Check that `bytes` is whole, valid records; return how many.
pub fn check_chunk(bytes: &[u8]) -> Result<u64, (usize, String)> {
    let mut at = 0;
    let mut n = 0;
    while at < bytes.len() {
        let (_, size) = wasmtap_abi::check_record(&bytes[at..]).map_err(|e| (at, format!("bad record: {e:?}")))?;
        at += size;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            layout_version: wasmtap_abi::LAYOUT_VERSION,
            wall_offset_ns: 5,
            started_mono_ns: 7,
            probes: vec!["proc:exec".into()],
            table: Default::default(),
            hostname: "h".into(),
            kernel: "k".into(),
        }
    }

    fn fork_record() -> Vec<u8> {
        let mut r = vec![0u8; wasmtap_abi::fork::SIZE];
        r[0..2].copy_from_slice(&4u16.to_le_bytes());
        r[2..4].copy_from_slice(&(wasmtap_abi::fork::SIZE as u16).to_le_bytes());
        r
    }

    #[test]
    fn round_trip_keeps_chunks_and_trailer() {
        let dir = std::env::temp_dir().join(format!("wasmtap-rec-{}", std::process::id()));
        let mut w = Writer::create(&dir, &header()).unwrap();
        let chunk = Chunk { bytes: [fork_record(), fork_record()].concat(), records: 2 };
        w.chunk(&chunk).unwrap();
        w.finish(&Trailer { ended_mono_ns: 9, counters: KernelCounters::default(), symbols: Vec::new() }).unwrap();
        let mut r = Reader::open(&dir).unwrap();
        assert_eq!(r.header, header());
        let got = r.next_chunk().unwrap().unwrap();
        assert_eq!((got.bytes, got.records), (chunk.bytes, 2));
        assert!(r.next_chunk().unwrap().is_none());
        assert_eq!(r.trailer().unwrap().ended_mono_ns, 9);
        std::fs::remove_file(dir).unwrap();
    }

    #[test]
    fn a_chunk_running_past_the_end_is_named_at_the_end_of_the_file() {
        let path = std::env::temp_dir().join(format!("wasmtap-rec-past-{}", std::process::id()));
        let mut w = Writer::create(&path, &header()).unwrap();
        w.chunk(&Chunk { bytes: [fork_record(), fork_record()].concat(), records: 2 }).unwrap();
        w.finish(&Trailer::default()).unwrap();
        let full = std::fs::read(&path).unwrap();
        let cut = full.len() - 5 - serde_json::to_vec(&Trailer::default()).unwrap().len() - 10;
        std::fs::write(&path, &full[..cut]).unwrap();
        // peek_trailer used to skip past the end and report an offset beyond the file.
        let e = Reader::open(&path).unwrap().peek_trailer().unwrap_err();
        let RecordingError::Corrupt { offset, reason, .. } = e else { panic!("{e}") };
        assert_eq!((offset, reason.as_str()), (cut as u64, "file ends inside the chunk (118 of 128 bytes)"));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let path = std::env::temp_dir().join(format!("wasmtap-rec-trunc-{}", std::process::id()));
        let mut w = Writer::create(&path, &header()).unwrap();
        w.chunk(&Chunk { bytes: fork_record(), records: 1 }).unwrap();
        w.finish(&Trailer::default()).unwrap();
        let full = std::fs::read(&path).unwrap();
        for cut in 0..full.len() {
            std::fs::write(&path, &full[..cut]).unwrap();
            let res = (|| -> Result<(), RecordingError> {
                let mut r = Reader::open(&path)?;
                while r.next_chunk()?.is_some() {}
                Ok(())
            })();
            assert!(res.is_err(), "truncated at {cut} was accepted");
        }
        std::fs::remove_file(path).unwrap();
    }
}
