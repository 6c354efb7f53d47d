//! The whole replay pipeline against corrupt input: recording bytes → decoders → plugins →
//! every output format. Each golden recording is mutated (bytes flipped inside records,
//! words set to 0 or all ones — sizes, timestamps, pids —, the end time moved to the end
//! of time, the file cut short) and replayed through the plugins that read it, in every
//! output format. A mutant may be refused (exit 2, one line naming the file) or replayed
//! (exit 0 or 1), but the host never panics, never hangs, and always says why.
//!
//! The cases are seeded, so a failure repeats. `WASMTAP_MUTANTS=N` runs N cases instead
//! of the default, for a longer search than CI's.

use std::path::Path;
use std::time::{Duration, Instant};

use wasmtap_tests::*;

/// Cases CI runs: about 20 s on a 2-core VM.
const DEFAULT_CASES: u64 = 96;
/// A replay of these small recordings takes well under a second; a hang is a failure.
const REPLAY_LIMIT: Duration = Duration::from_secs(20);

/// xorshift64*: a seeded, dependency-free source of mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Frames of a recording: (offset of the payload, its length, tag).
fn frames(rec: &[u8]) -> Vec<(usize, usize, u8)> {
    let header_len = u32::from_le_bytes(rec[16..20].try_into().unwrap()) as usize;
    let mut at = 20 + header_len;
    let mut out = Vec::new();
    while at + 5 <= rec.len() {
        let len = u32::from_le_bytes(rec[at + 1..at + 5].try_into().unwrap()) as usize;
        out.push((at + 5, len, rec[at]));
        at += 5 + len;
    }
    out
}

/// One mutant of `rec`, and what was done to it.
fn mutate(rec: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut m = rec.to_vec();
    let chunks: Vec<_> = frames(rec).into_iter().filter(|f| f.2 == 1 && f.1 >= 8).collect();
    let (start, len, _) = chunks[rng.below(chunks.len())];
    match rng.below(4) {
        0 => {
            let n = 1 + rng.below(16);
            for _ in 0..n {
                let at = start + rng.below(len);
                m[at] ^= 1 << rng.below(8);
            }
            (m, format!("{n} bits flipped in the chunk at byte {start}"))
        }
        1 => {
            let at = start + rng.below(len / 8) * 8;
            let word = if rng.below(2) == 0 { [0u8; 8] } else { [0xff; 8] };
            m[at..at + 8].copy_from_slice(&word);
            (m, format!("word at byte {at} set to {:#x}", word[0]))
        }
        2 => {
            let Some(&(t_start, t_len, _)) = frames(rec).iter().find(|f| f.2 == 2) else { return (m, "none".into()) };
            let json = String::from_utf8_lossy(&rec[t_start..t_start + t_len]).into_owned();
            let Some(at) = json.find("\"ended_mono_ns\":") else { return (m, "no end time".into()) };
            let digits = json[at + 16..].chars().take_while(char::is_ascii_digit).count();
            // Same width, so the frame's length stays right: all nines, far in the future.
            let end = "9".repeat(digits);
            m[t_start + at + 16..t_start + at + 16 + digits].copy_from_slice(end.as_bytes());
            (m, format!("end time {end}"))
        }
        _ => {
            let cut = 12 + rng.below(rec.len() - 12);
            m.truncate(cut);
            (m, format!("cut at byte {cut}"))
        }
    }
}

const FORMATS: [&str; 4] = ["text", "json", "folded", "prometheus"];

/// The recordings and the plugins that read each.
const CASES: [(&str, &[&str]); 8] = [
    ("syscalls.wtrec", &["syscount", "syslatency"]),
    ("runqlat.wtrec", &["runqlat"]),
    ("cpudist.wtrec", &["cpudist"]),
    ("bio.wtrec", &["biosnoop", "biolatency"]),
    ("procs.wtrec", &["execsnoop", "exitsnoop", "proclife", "forktime"]),
    ("files.wtrec", &["opensnoop", "opentrace", "openaggr"]),
    ("profile.wtrec", &["profile"]),
    ("writes.wtrec", &["wstat", "syscount"]),
];

#[test]
fn mutated_recordings_replay_or_are_refused_in_every_format_without_a_panic_or_a_hang() {
    let _g = serial();
    let cases = std::env::var("WASMTAP_MUTANTS").ok().and_then(|n| n.parse().ok()).unwrap_or(DEFAULT_CASES);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let dir = std::env::temp_dir().join(format!("wasmtap-mutants-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut rng = Rng(0x5eed_0f1a_7e20_2611);
    let mut refused = 0;
    for case in 0..cases {
        let (file, plugins) = CASES[case as usize % CASES.len()];
        let rec = std::fs::read(golden.join(file)).unwrap();
        let (mutant, what) = mutate(&rec, &mut rng);
        let path = dir.join(format!("{case}-{file}"));
        std::fs::write(&path, &mutant).unwrap();
        let format = FORMATS[(case / CASES.len() as u64) as usize % FORMATS.len()];
        let mut c = wasmtap();
        c.arg("replay").arg(&path).args(plugins.iter().map(|p| wasm(p))).args(["-o", format]);
        let started = Instant::now();
        let o = run(&mut c);
        let took = started.elapsed();
        let err = stderr(&o);
        let context = format!("case {case}: {file} ({what}), -o {format}: {:?} in {took:?}\n{err}", o.status);
        assert!(matches!(o.status.code(), Some(0..=2)), "{context}");
        assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{context}");
        assert!(took < REPLAY_LIMIT, "{context}");
        if o.status.code() == Some(2) {
            refused += 1;
            assert!(err.contains(&path.display().to_string()), "a refusal names the file: {context}");
        }
        std::fs::remove_file(&path).unwrap();
    }
    std::fs::remove_dir(&dir).unwrap();
    // Both paths were taken: some mutants replayed, some were refused.
    assert!(refused > 0 && refused < cases, "{refused} of {cases} refused");
}
