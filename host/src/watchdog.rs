//! The whole-run watchdog, after DTrace's deadman: when the run loop makes no progress
//! for `--watchdog` (a stdout nobody reads, a host call that never returns), the run
//! ends with one line naming what was stuck and for how long, instead of hanging.
//!
//! The loop and the plugins' calls bump a process-wide heartbeat and say what they are
//! doing ([`beat`], [`calling`]); writes to stdout and stderr go through [`Watched`], so
//! a reader that is slow but reading is progress. A thread watches the heartbeat. On a
//! stall it ends the `-c` command, writes its line (without waiting on a stderr that is
//! stalled too) and exits with code 1; the kernel detaches the collectors when the
//! process ends. A stuck thread cannot be unwound, so exiting is the only way out.
//!
//! ```no_run
//! use std::time::Duration;
//! use wasmtap::watchdog::{self, Doing, Watchdog};
//! let _dog = Watchdog::start(Duration::from_secs(30), None).unwrap();
//! loop {
//!     watchdog::beat(Doing::Dispatching);
//!     // … work that must not stall for 30 s …
//! }
//! ```

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why the watchdog could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error("cannot start the watchdog thread: {0}")]
    Thread(io::Error),
}

/// What the run loop is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Doing {
    Starting = 0,
    Waiting,
    Dispatching,
    Ticking,
    Flushing,
    Finishing,
    Reporting,
}

impl Doing {
    const ALL: [Doing; 7] = [
        Doing::Starting,
        Doing::Waiting,
        Doing::Dispatching,
        Doing::Ticking,
        Doing::Flushing,
        Doing::Finishing,
        Doing::Reporting,
    ];

    fn describe(self) -> &'static str {
        match self {
            Doing::Starting => "starting the plugins",
            Doing::Waiting => "waiting for events",
            Doing::Dispatching => "dispatching events to the plugins",
            Doing::Ticking => "running the plugins' timers",
            Doing::Flushing => "writing output",
            Doing::Finishing => "finishing the plugins",
            Doing::Reporting => "writing the end-of-run reports",
        }
    }
}

/// The heartbeat of the one run of this process.
struct Heartbeat {
    beats: AtomicU64,
    doing: AtomicU8,
    in_plugin: AtomicBool,
    /// The plugin being called and its callback, while `in_plugin`.
    plugin: Mutex<(String, &'static str)>,
    writing: AtomicBool,
}

static BEAT: Heartbeat = Heartbeat::new();

impl Heartbeat {
    const fn new() -> Heartbeat {
        Heartbeat {
            beats: AtomicU64::new(0),
            doing: AtomicU8::new(0),
            in_plugin: AtomicBool::new(false),
            plugin: Mutex::new((String::new(), "")),
            writing: AtomicBool::new(false),
        }
    }

    fn beat(&self, doing: Doing) {
        self.doing.store(doing as u8, Ordering::Relaxed);
        self.in_plugin.store(false, Ordering::Relaxed);
        self.beats.fetch_add(1, Ordering::Relaxed);
    }

    fn calling(&self, plugin: &str, callback: &'static str) {
        if let Ok(mut p) = self.plugin.lock() {
            p.0.clear();
            p.0.push_str(plugin);
            p.1 = callback;
        }
        self.in_plugin.store(true, Ordering::Relaxed);
        self.beats.fetch_add(1, Ordering::Relaxed);
    }

    /// What the loop was doing at the last beat, for the message.
    fn what(&self) -> String {
        let doing = Doing::ALL.get(usize::from(self.doing.load(Ordering::Relaxed))).copied().unwrap_or(Doing::Starting);
        let what = if self.writing.load(Ordering::Relaxed) {
            "writing output (is anyone reading it?)"
        } else {
            doing.describe()
        };
        // try_lock: the stuck thread may hold it, and the watchdog must not wait.
        let plugin = match (self.in_plugin.load(Ordering::Relaxed), self.plugin.try_lock()) {
            (true, Ok(p)) => format!(" in plugin `{}` ({})", p.0, p.1),
            (true, Err(_)) => " in a plugin".to_string(),
            (false, _) => String::new(),
        };
        format!("{what}{plugin}")
    }
}

/// The loop made progress and is now doing `doing` (outside any plugin).
pub fn beat(doing: Doing) {
    BEAT.beat(doing);
}

/// The loop is about to call `callback` of `plugin`.
pub fn calling(plugin: &str, callback: &'static str) {
    BEAT.calling(plugin, callback);
}

/// A writer whose writes the watchdog sees: blocked in one is "writing output", and each
/// one that completes is progress.
pub struct Watched<W>(pub W);

impl<W: Write> Write for Watched<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        BEAT.writing.store(true, Ordering::Relaxed);
        let r = self.0.write(buf);
        BEAT.writing.store(false, Ordering::Relaxed);
        BEAT.beats.fetch_add(1, Ordering::Relaxed);
        r
    }

    fn flush(&mut self) -> io::Result<()> {
        BEAT.writing.store(true, Ordering::Relaxed);
        let r = self.0.flush();
        BEAT.writing.store(false, Ordering::Relaxed);
        r
    }
}

/// The message of a stall.
pub fn stall_message(what: &str, stalled: Duration, timeout: Duration, command: Option<(u32, bool)>) -> String {
    let mut msg = format!(
        "watchdog: no progress for {:.1} s while {what}; ending the run (--watchdog {})",
        stalled.as_secs_f64(),
        humantime(timeout)
    );
    match command {
        Some((pid, true)) => msg += &format!("; the -c command (pid {pid}) was ended"),
        Some((pid, false)) => msg += &format!("; the -c command (pid {pid}) had already exited"),
        None => {}
    }
    msg
}

fn humantime(d: Duration) -> String {
    match (d.as_secs(), d.subsec_millis()) {
        (s, 0) if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        (s, 0) => format!("{s}s"),
        (s, ms) => format!("{}ms", s * 1000 + u64::from(ms)),
    }
}

/// The watching thread; dropping it stops the watch.
pub struct Watchdog {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Watch the heartbeat from now on; after `timeout` without a beat, end `command`
    /// (the `-c` child's pid) and the process.
    pub fn start(timeout: Duration, command: Option<u32>) -> Result<Watchdog, WatchdogError> {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("wasmtap-watchdog".into())
            .spawn(move || watch(timeout, command, &stopped))
            .map_err(WatchdogError::Thread)?;
        Ok(Watchdog { stop: Some(stop), thread: Some(thread) })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(timeout: Duration, command: Option<u32>, stopped: &Receiver<()>) {
    // Checks often enough to end within an eighth of the timeout after it passes.
    let every = (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let (mut last, mut since) = (BEAT.beats.load(Ordering::Relaxed), Instant::now());
    while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
        let now = BEAT.beats.load(Ordering::Relaxed);
        if now != last {
            (last, since) = (now, Instant::now());
            continue;
        }
        if since.elapsed() >= timeout {
            let what = BEAT.what();
            let ended = command.map(|pid| (pid, crate::sys::end_child(pid, Duration::from_millis(500))));
            let msg = stall_message(&what, since.elapsed(), timeout, ended);
            crate::sys::write_stderr_within(format!("wasmtap: {msg}\n").as_bytes(), Duration::from_secs(1));
            crate::sys::exit_now(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_what_was_stuck_how_long_and_the_command() {
        let msg = stall_message(
            "writing output (is anyone reading it?) in plugin `snoop` (on-batch)",
            Duration::from_millis(2_040),
            Duration::from_secs(2),
            Some((4242, true)),
        );
        assert_eq!(
            msg,
            "watchdog: no progress for 2.0 s while writing output (is anyone reading it?) in plugin `snoop` \
             (on-batch); ending the run (--watchdog 2s); the -c command (pid 4242) was ended"
        );
        let msg = stall_message("finishing the plugins", Duration::from_secs(600), Duration::from_secs(600), None);
        assert!(msg.ends_with("while finishing the plugins; ending the run (--watchdog 10m)"), "{msg}");
        assert_eq!(humantime(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn the_heartbeat_says_what_the_loop_does_and_in_which_plugin() {
        let hb = Heartbeat::new();
        hb.beat(Doing::Ticking);
        assert_eq!(hb.what(), "running the plugins' timers");
        hb.calling("syscount", "on-tick");
        assert_eq!(hb.what(), "running the plugins' timers in plugin `syscount` (on-tick)");
        hb.beat(Doing::Flushing);
        assert_eq!(hb.what(), "writing output");
        hb.writing.store(true, Ordering::Relaxed);
        assert_eq!(hb.what(), "writing output (is anyone reading it?)");
    }

    #[test]
    fn a_completed_write_is_progress() {
        let before = BEAT.beats.load(Ordering::Relaxed);
        let mut w = Watched(Vec::new());
        w.write_all(b"row\n").unwrap();
        assert!(BEAT.beats.load(Ordering::Relaxed) > before);
        assert_eq!(w.0, b"row\n");
    }

    #[test]
    fn a_stopped_watchdog_ends_nothing() {
        let dog = Watchdog::start(Duration::from_millis(50), None).unwrap();
        drop(dog);
        std::thread::sleep(Duration::from_millis(100));
    }
}
