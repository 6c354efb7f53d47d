//! The daemon's wire protocol (docs/service.md), version [`PROTOCOL`]: frames over a Unix
//! stream socket. A frame is a 4-byte little-endian payload length, a kind byte and the
//! payload, at most [`MAX_FRAME`] bytes. Control frames carry one JSON message; output
//! frames carry the bytes a run wrote to its stdout or stderr, as written.
//!
//! The client speaks first with `hello`, naming the protocol it speaks; a daemon that
//! speaks another answers with an `error` naming both and closes. Everything the daemon
//! reads is bounded before it is buffered: a length over the limit, an unknown kind or a
//! message that does not parse ends the connection with an error, never a panic.

use serde::{Deserialize, Serialize};

/// The protocol this build speaks.
pub const PROTOCOL: u32 = 2;
/// The most bytes one frame's payload may hold.
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes before the payload: the length and the kind.
pub const HEADER: usize = 5;

/// What a frame holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One JSON message: a [`Request`] from the client, a [`Reply`] from the daemon.
    Control = 1,
    /// Bytes the run wrote to its stdout.
    Stdout = 2,
    /// Bytes the run wrote to its stderr.
    Stderr = 3,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Control),
            2 => Some(Kind::Stdout),
            3 => Some(Kind::Stderr),
            _ => None,
        }
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    pub payload: Vec<u8>,
}

/// A frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("a frame of {0} bytes, more than the {MAX_FRAME} allowed")]
    TooLong(usize),
    #[error("a frame of unknown kind {0}")]
    UnknownKind(u8),
    #[error("a control message that does not parse: {0}")]
    BadMessage(String),
    #[error("a control frame was expected, got {0:?}")]
    NotControl(Kind),
}

impl Frame {
    pub fn control<M: Serialize>(message: &M) -> Frame {
        // Messages are plain data: serializing them cannot fail.
        let payload = serde_json::to_vec(message).unwrap_or_default();
        Frame { kind: Kind::Control, payload }
    }

    /// The frame's bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.payload.len());
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.push(self.kind as u8);
        out.extend_from_slice(&self.payload);
        out
    }

    /// The first frame of `buf` and the bytes it took, or `None` if `buf` holds only part
    /// of one. Refuses a header that announces too much before any of it is buffered.
    pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
        let Some(header) = buf.get(..HEADER) else { return Ok(None) };
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        if len > MAX_FRAME {
            return Err(WireError::TooLong(len));
        }
        let kind = Kind::from_byte(header[4]).ok_or(WireError::UnknownKind(header[4]))?;
        let Some(payload) = buf.get(HEADER..HEADER + len) else { return Ok(None) };
        Ok(Some((Frame { kind, payload: payload.to_vec() }, HEADER + len)))
    }

    /// The JSON message of a control frame.
    pub fn message<M: for<'de> Deserialize<'de>>(&self) -> Result<M, WireError> {
        if self.kind != Kind::Control {
            return Err(WireError::NotControl(self.kind));
        }
        serde_json::from_slice(&self.payload).map_err(|e| WireError::BadMessage(e.to_string()))
    }
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// The first message: the protocol the client speaks and what it wants.
    Hello { protocol: u32, ask: Ask },
    /// End the run (the client's Ctrl-C, or its `-c` command exited): the report follows.
    Stop,
}

/// What a client wants of a session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Ask {
    /// `wasmtap run ARGS`, as the client's user typed them (without `run`). With a
    /// `command_pid`, the client has started its `-c` command, held before exec, and the
    /// run traces that process and its children. `fds` names the descriptors that came
    /// with the hello (`SCM_RIGHTS`), in order.
    Run {
        args: Vec<String>,
        command_pid: Option<u32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fds: Vec<Passed>,
        /// `record` rather than `run` (its recording passed as `recording`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        record: bool,
    },
    /// `wasmtap list [PATTERN]`, which reads tracefs (root's): the listing is written to
    /// the client's stdout, passed with the hello (`fds`: stdout, stderr).
    List {
        pattern: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fds: Vec<Passed>,
    },
    /// The caller's sessions (everyone's for an admin).
    Sessions,
    /// End session `id` (the caller's own, or anyone's for an admin).
    StopSession { id: u64 },
}

/// A descriptor a client passes with its hello.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Passed {
    /// Its stdout: the run writes its output there itself, with no relay.
    Stdout,
    /// Its stderr, likewise.
    Stderr,
    /// A pidfd of its `-c` command (`command_pid`), so that the daemon checks that very process.
    Command,
    /// A plugin file it named (the argument as typed), open for reading: the daemon reads
    /// it as the user could, never by its path.
    Plugin(String),
    /// The recording `record -o FILE` writes, created by the client as the user.
    Recording,
    /// The flame graph `--flamegraph FILE` writes, likewise.
    Flamegraph,
}

/// What the daemon answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Reply {
    /// The hello was accepted: the session's id and the rule that applies.
    Welcome { protocol: u32, session: u64, rule: String },
    /// The run is attached: a held `-c` command may exec now.
    Attached,
    /// The run ended with this exit code; nothing follows.
    Exit { code: i32 },
    /// Sessions, for `sessions`.
    Sessions { sessions: Vec<SessionInfo> },
    /// A refusal or a failure, one line; the connection closes after it.
    Error { message: String },
}

/// One session as `wasmtap sessions` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    pub id: u64,
    pub user: String,
    pub uid: u32,
    pub pid: u32,
    pub started_unix_s: u64,
    pub args: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip_and_partial_input_waits() {
        let f = Frame::control(&Request::Hello {
            protocol: PROTOCOL,
            ask: Ask::Run { args: vec!["syscount".into()], command_pid: Some(42), fds: vec![], record: false },
        });
        let bytes = f.encode();
        for cut in 0..bytes.len() {
            assert_eq!(Frame::decode(&bytes[..cut]), Ok(None));
        }
        let (g, used) = Frame::decode(&bytes).unwrap().unwrap();
        assert_eq!((g.clone(), used), (f, bytes.len()));
        let back: Request = g.message().unwrap();
        assert_eq!(
            back,
            Request::Hello {
                protocol: 2,
                ask: Ask::Run { args: vec!["syscount".into()], command_pid: Some(42), fds: vec![], record: false }
            }
        );
        let json = String::from_utf8(g.payload).unwrap();
        assert_eq!(json, r#"{"type":"hello","protocol":2,"ask":{"what":"run","args":["syscount"],"command_pid":42}}"#);
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        let mut too_long = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        too_long.push(1);
        assert_eq!(Frame::decode(&too_long), Err(WireError::TooLong(MAX_FRAME + 1)));
        assert_eq!(Frame::decode(&[0, 0, 0, 0, 9]), Err(WireError::UnknownKind(9)));
        let bad = Frame { kind: Kind::Control, payload: br#"{"type":"hello","protocol":1}"#.to_vec() };
        let err = bad.message::<Request>().unwrap_err().to_string();
        assert!(err.starts_with("a control message that does not parse: missing field `ask`"), "{err}");
        let out = Frame { kind: Kind::Stdout, payload: b"x".to_vec() };
        assert_eq!(out.message::<Request>(), Err(WireError::NotControl(Kind::Stdout)));
    }

    proptest! {
        /// Any bytes: the decoder answers (a frame, more needed, or an error) without
        /// panicking, never takes more than it was given, and never buffers past the limit.
        #[test]
        fn the_decoder_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            match Frame::decode(&bytes) {
                Ok(Some((f, used))) => {
                    prop_assert!(used <= bytes.len());
                    prop_assert_eq!(f.payload.len() + HEADER, used);
                    let _ = f.message::<Request>();
                    let _ = f.message::<Reply>();
                }
                Ok(None) => prop_assert!(bytes.len() < HEADER || bytes.len() < HEADER + u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize),
                Err(_) => {}
            }
        }

        /// Any control message's JSON, mutated: decoding a message never panics.
        #[test]
        fn control_messages_take_any_json(s in ".{0,80}", args in proptest::collection::vec(".{0,8}", 0..4), pid in any::<Option<u32>>()) {
            let f = Frame::control(&Request::Hello { protocol: PROTOCOL, ask: Ask::Run { args, command_pid: pid, fds: vec![Passed::Stdout], record: false } });
            let back: Request = f.message().unwrap();
            prop_assert_eq!(Frame::control(&back), f);
            let g = Frame { kind: Kind::Control, payload: s.into_bytes() };
            let _ = g.message::<Request>();
            let _ = g.message::<Reply>();
        }
    }
}
