//! A user's side of a session: connect, say hello, start the `-c` command held before
//! exec, release it once the daemon's run is attached, copy the run's output to this
//! process's stdout and stderr, and end with the run's exit code. Ctrl-C (or the
//! command's exit) asks the daemon to stop the run; the report still comes.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use super::wire::{Ask, Frame, Kind, Passed, Reply, Request, PROTOCOL};
use crate::sys::GatedChild;

/// How a session ended, for the exit code.
pub struct Ended {
    pub code: i32,
}

/// What a client starts, opens or creates as its user and sends with its request.
pub struct Sent<'a> {
    /// The `-c` command, started here, held before exec.
    pub command: Option<&'a str>,
    /// Plugin files, by the arguments naming them (the file, or a registry reference
    /// pulled here into the user's store), opened here.
    pub plugin_files: &'a [(String, std::path::PathBuf)],
    /// Output files created here: the recording, the flame graph.
    pub files: Vec<(Passed, std::fs::File)>,
}

/// Run `wasmtap run ARGS` (or `record ARGS`) through the daemon at `socket`, with what
/// `sent` names started, opened or created here, as this user, and passed to the daemon.
pub fn run(socket: &Path, args: Vec<String>, record: bool, sent: Sent<'_>) -> anyhow::Result<Ended> {
    let Sent { command, plugin_files, files } = sent;
    let plugins: Vec<(String, std::fs::File)> = plugin_files
        .iter()
        .map(|(arg, path)| {
            let file =
                std::fs::File::open(path).with_context(|| format!("cannot open plugin file {}", path.display()))?;
            Ok((arg.clone(), file))
        })
        .collect::<anyhow::Result<_>>()?;
    let stream = connect(socket)?;
    let mut child = match command {
        Some(cmd) => {
            let argv =
                shlex::split(cmd).filter(|a| !a.is_empty()).with_context(|| format!("cannot parse command `{cmd}`"))?;
            Some(GatedChild::spawn(&argv, None).with_context(|| format!("cannot start `{cmd}`"))?)
        }
        None => None,
    };
    // The run writes to this process's stdout and stderr itself, and the daemon checks
    // the command by a pidfd: all passed with the hello.
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let mut fds = vec![stdout.as_fd(), stderr.as_fd()];
    let mut passed = vec![Passed::Stdout, Passed::Stderr];
    let pidfd = match &child {
        Some(c) => Some(crate::sys::fds::pidfd_open(c.pid()).context("cannot open a pidfd of the command")?),
        None => None,
    };
    if let Some(fd) = &pidfd {
        fds.push(fd.as_fd());
        passed.push(Passed::Command);
    }
    for (name, file) in &plugins {
        fds.push(file.as_fd());
        passed.push(Passed::Plugin(name.clone()));
    }
    for (what, file) in &files {
        fds.push(file.as_fd());
        passed.push(what.clone());
    }
    if fds.len() > crate::sys::fds::MAX_FDS {
        anyhow::bail!("too many files to send: at most {} in all", crate::sys::fds::MAX_FDS);
    }
    let ask = Ask::Run { args, command_pid: child.as_ref().map(GatedChild::pid), fds: passed, record };
    send_with(&stream, ask, &fds)?;
    drop((pidfd, plugins, files));
    // Ctrl-C, or the command's exit, asks for the report.
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let done = Arc::new(AtomicBool::new(false));
    let command_pid = child.as_ref().map(GatedChild::pid);
    let watcher = {
        let (stream, stop, done) = (stream.try_clone()?, stop.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let exited = command_pid.is_some_and(zombie);
                if stop.load(Ordering::Relaxed) || exited {
                    let _ = send(&stream, &Request::Stop);
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let ended = relay(&stream, &mut child);
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    if let Some(c) = &mut child {
        let _ = c.try_wait();
    }
    ended
}

/// Whether `pid` (our child) has exited: it waits to be reaped, or is gone.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Copy the session's frames out until its end.
fn relay(stream: &UnixStream, child: &mut Option<GatedChild>) -> anyhow::Result<Ended> {
    let mut frames = Frames::new(stream.try_clone()?);
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    loop {
        let Some(frame) = frames.next()? else {
            anyhow::bail!("the wasmtap daemon ended the session without a report (was it stopped or restarted?)");
        };
        match frame.kind {
            Kind::Stdout => {
                out.write_all(&frame.payload)?;
                out.flush()?;
            }
            Kind::Stderr => {
                err.write_all(&frame.payload)?;
                err.flush()?;
            }
            Kind::Control => match frame.message::<Reply>()? {
                Reply::Welcome { .. } | Reply::Sessions { .. } => {}
                Reply::Attached => {
                    if let Some(c) = child {
                        c.release().context("cannot start the command")?;
                    }
                }
                Reply::Exit { code } => return Ok(Ended { code }),
                Reply::Error { message } => anyhow::bail!("{message}"),
            },
        }
    }
}

/// `wasmtap list [PATTERN]` through the daemon, written to this process's stdout and
/// stderr (passed with the hello); the listing's exit code.
pub fn list(socket: &Path, pattern: Option<String>) -> anyhow::Result<Ended> {
    let stream = connect(socket)?;
    let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
    let ask = Ask::List { pattern, fds: vec![Passed::Stdout, Passed::Stderr] };
    send_with(&stream, ask, &[stdout.as_fd(), stderr.as_fd()])?;
    match ask_on(stream)? {
        Reply::Exit { code } => Ok(Ended { code }),
        _ => anyhow::bail!("the daemon answered something else than the listing's end"),
    }
}

/// One question that is not a run (`sessions`, `stop`): its one answer.
pub fn ask(socket: &Path, ask: Ask) -> anyhow::Result<Reply> {
    let stream = connect(socket)?;
    send(&stream, &Request::Hello { protocol: PROTOCOL, ask })?;
    ask_on(stream)
}

/// The one answer to the hello sent on `stream`.
fn ask_on(stream: UnixStream) -> anyhow::Result<Reply> {
    let mut frames = Frames::new(stream);
    loop {
        match frames.next()? {
            None => anyhow::bail!("the wasmtap daemon closed the connection without an answer"),
            Some(f) if f.kind == Kind::Control => match f.message::<Reply>()? {
                Reply::Welcome { .. } => continue,
                Reply::Error { message } => anyhow::bail!("{message}"),
                reply => return Ok(reply),
            },
            Some(_) => continue,
        }
    }
}

fn connect(socket: &Path) -> anyhow::Result<UnixStream> {
    UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach the wasmtap daemon at {} (without root or CAP_BPF, wasmtap traces through the shared host's daemon: is `wasmtap daemon` running?)",
            socket.display()
        )
    })
}

/// The hello asking `ask`, with `fds` as `SCM_RIGHTS` on its first byte.
fn send_with(stream: &UnixStream, ask: Ask, fds: &[std::os::fd::BorrowedFd<'_>]) -> anyhow::Result<()> {
    let hello = Frame::control(&Request::Hello { protocol: PROTOCOL, ask }).encode();
    let sent = crate::sys::fds::send_with_fds(stream.as_fd(), &hello, fds).context("cannot talk to the daemon")?;
    (&*stream).write_all(&hello[sent..])?;
    Ok(())
}

fn send(stream: &UnixStream, request: &Request) -> std::io::Result<()> {
    (&*stream).write_all(&Frame::control(request).encode())
}

/// Frames read from a stream, one at a time.
struct Frames {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl Frames {
    fn new(stream: UnixStream) -> Frames {
        Frames { stream, buf: Vec::new() }
    }

    fn next(&mut self) -> anyhow::Result<Option<Frame>> {
        loop {
            if let Some((frame, used)) = Frame::decode(&self.buf)? {
                self.buf.drain(..used);
                return Ok(Some(frame));
            }
            let mut chunk = [0u8; 64 << 10];
            let n = match self.stream.read(&mut chunk) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
