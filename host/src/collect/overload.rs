//! The overload guard, after SystemTap's: measure what the collectors' programs cost the
//! traced system, from the kernel's own per-program run time and run count
//! (`bpf_stats`, Linux 5.8), and stop the run when they cost more than `--max-kernel-cpu`
//! percent of one CPU.
//!
//! The kernel counts run time only while statistics are enabled, and then reads the
//! clock twice per program run: tens of nanoseconds on every traced event. So the guard
//! samples: statistics are on for [`WINDOW`] every [`PERIOD`] (a 3 % duty cycle), and the
//! share is the run time the programs gained in the window over the window's wall time.
//! A burst between windows goes unseen; a sustained cost, which is what hurts the
//! traced system, does not.
//!
//! Turning statistics on and reading programs by id need `CAP_SYS_ADMIN`, which the host
//! gives up once the collectors are attached. So the measuring is done by a process of
//! its own ([`Meter`], running [`serve`] as `wasmtap __collector-stats`), started before
//! the collectors are loaded, so that they exclude it as they exclude the host (its own
//! system calls would otherwise show in a system-wide trace). It keeps `CAP_SYS_ADMIN`
//! and nothing else, sets `no_new_privs`, shares no memory with the plugins, reads the
//! programs' ids from its first line, then measures one window per line it is sent,
//! answering with one line of readings. It ends when the host closes its stdin.
//!
//! ```no_run
//! # use wasmtap::collect::overload::{Guard, Meter, Notice, Program};
//! let meter = Meter::spawn().unwrap(); // before the collectors load: they exclude meter.pid()
//! let guard = Guard::start(meter, vec![Program { name: "wt_sys_enter".into(), id: 42 }], 50).unwrap();
//! if let Some(Notice::Overloaded(why)) = guard.poll() {
//!     eprintln!("wasmtap: {why}");
//! }
//! let cost = guard.finish();
//! # let _ = cost;
//! ```

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::accounting::{CollectorCost, ProgramCost};

/// How often the collectors' cost is measured.
pub const PERIOD: Duration = Duration::from_secs(5);
/// How long each measurement keeps the kernel's statistics on.
pub const WINDOW: Duration = Duration::from_millis(150);
/// The first measurement starts this long after the probes are attached, so that a run
/// of a few seconds is measured once.
const FIRST: Duration = Duration::from_secs(1);
/// Programs named in the message of an overload, costliest first.
const NAMED_MAX: usize = 4;

/// Why the guard could not start.
#[derive(Debug, thiserror::Error)]
pub enum OverloadError {
    #[error("cannot start the overload guard's thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot start the overload guard's measuring process: {0}")]
    Helper(std::io::Error),
    #[error("the overload guard's measuring process cannot keep CAP_SYS_ADMIN alone: {0}")]
    Privileges(std::io::Error),
    #[error("the overload guard's measuring process was not told which programs to measure")]
    NoPrograms,
}

/// One loaded collector program.
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    /// The kernel's id of the program.
    pub id: u32,
}

/// A program's run time and runs, as the kernel counts them while statistics are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    pub run_ns: u64,
    pub runs: u64,
}

impl Reading {
    /// What was added between `self` and a later reading; counters that went back (a
    /// program reloaded under the same id cannot, but the kernel is not ours) give 0.
    fn since(self, before: Reading) -> Reading {
        Reading { run_ns: self.run_ns.saturating_sub(before.run_ns), runs: self.runs.saturating_sub(before.runs) }
    }
}

/// `run_ns` of CPU time over `wall`, in percent of one CPU (over 100 when the programs
/// ran on several CPUs at once).
pub fn percent_of_cpu(run_ns: u64, wall: Duration) -> f64 {
    let wall_ns = wall.as_nanos();
    if wall_ns == 0 {
        return 0.0;
    }
    run_ns as f64 * 100.0 / wall_ns as f64
}

/// What each program gained over one measuring window, in the order of the programs.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub gained: Vec<Reading>,
    pub wall: Duration,
}

impl Window {
    /// The window between two readings of the same programs; a program missing from
    /// either reading (unloaded meanwhile) gained nothing.
    pub fn between(before: &[Option<Reading>], after: &[Option<Reading>], wall: Duration) -> Window {
        let gained = before
            .iter()
            .zip(after)
            .map(|(b, a)| match (b, a) {
                (Some(b), Some(a)) => a.since(*b),
                _ => Reading::default(),
            })
            .collect();
        Window { gained, wall }
    }

    /// All programs together, in percent of one CPU.
    pub fn percent(&self) -> f64 {
        percent_of_cpu(self.gained.iter().map(|r| r.run_ns).sum(), self.wall)
    }
}

impl CollectorCost {
    pub fn new(programs: &[Program], limit_percent: u32) -> CollectorCost {
        CollectorCost {
            limit_percent,
            window_ms: WINDOW.as_millis() as u64,
            period_ms: PERIOD.as_millis() as u64,
            programs: programs.iter().map(|p| ProgramCost { name: p.name.clone(), ..Default::default() }).collect(),
            ..Default::default()
        }
    }

    /// Count one window in; true when it went over the limit.
    pub fn add(&mut self, w: &Window) -> bool {
        for (p, r) in self.programs.iter_mut().zip(&w.gained) {
            p.runs = p.runs.saturating_add(r.runs);
            p.run_ns = p.run_ns.saturating_add(r.run_ns);
            p.peak_percent = p.peak_percent.max(percent_of_cpu(r.run_ns, w.wall));
        }
        let percent = w.percent();
        self.windows = self.windows.saturating_add(1);
        self.last_percent = percent;
        self.peak_percent = self.peak_percent.max(percent);
        percent > f64::from(self.limit_percent)
    }

    /// The one line that says why the run stopped: the window's share, the limit, and
    /// the costliest programs with their share, runs and time per run.
    pub fn overload_message(&self, w: &Window) -> String {
        let mut costly: Vec<(&ProgramCost, &Reading)> =
            self.programs.iter().zip(&w.gained).filter(|(_, r)| r.runs > 0).collect();
        costly.sort_by_key(|(_, r)| std::cmp::Reverse(r.run_ns));
        let named: Vec<String> = costly
            .iter()
            .take(NAMED_MAX)
            .map(|(p, r)| {
                let each = r.run_ns / r.runs.max(1);
                let share = percent_of_cpu(r.run_ns, w.wall);
                format!("{} {share:.1}% ({} runs, {each} ns each)", p.name, r.runs)
            })
            .collect();
        let more = costly.len().saturating_sub(NAMED_MAX);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        format!(
            "overload: the collectors used {:.1}% of one CPU over {} ms, more than --max-kernel-cpu {}%: {}{more}; stopping the run",
            w.percent(),
            w.wall.as_millis(),
            self.limit_percent,
            named.join(", ")
        )
    }
}

/// What the guard has to say to the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// The collectors cost more than the limit: the run must stop.
    Overloaded(String),
    /// The cost cannot be measured on this kernel; the limit is not enforced.
    Unmeasured(String),
}

#[derive(Default)]
struct State {
    cost: CollectorCost,
    notice: Option<Notice>,
}

/// The measuring thread; [`Guard::poll`] tells the run what it found.
pub struct Guard {
    state: Arc<Mutex<State>>,
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Guard {
    /// Measure `programs` with `meter` from now on, against `limit_percent` of one CPU.
    pub fn start(mut meter: Meter, programs: Vec<Program>, limit_percent: u32) -> Result<Guard, OverloadError> {
        let state = Arc::new(Mutex::new(State { cost: CollectorCost::new(&programs, limit_percent), notice: None }));
        // A measuring process that cannot be told is found out at the first window, and
        // the run is told the cost is not measured, as for any other failure of it.
        let _ = meter.name(&programs);
        let helper = meter;
        let (stop, stopped) = mpsc::channel();
        let shared = state.clone();
        let thread = std::thread::Builder::new()
            .name("wasmtap-overload".into())
            .spawn(move || measure(helper, &shared, &stopped))
            .map_err(OverloadError::Thread)?;
        Ok(Guard { state, stop: Some(stop), thread: Some(thread) })
    }

    /// What the guard found since the last call, once.
    pub fn poll(&self) -> Option<Notice> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).notice.take()
    }

    /// Stop measuring; what was measured.
    pub fn finish(mut self) -> CollectorCost {
        self.stop_thread();
        std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).cost)
    }

    fn stop_thread(&mut self) {
        // Dropping the sender wakes the thread at once, and it turns statistics off.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// Sleep `d`, or return false as soon as the guard is stopped.
fn sleep(stopped: &Receiver<()>, d: Duration) -> bool {
    matches!(stopped.recv_timeout(d), Err(RecvTimeoutError::Timeout))
}

/// The thread: one window every period, until stopped or tripped.
fn measure(mut helper: Meter, state: &Mutex<State>, stopped: &Receiver<()>) {
    let mut wait = FIRST;
    loop {
        if !sleep(stopped, wait) {
            return;
        }
        wait = PERIOD.saturating_sub(WINDOW);
        let (before, after, wall) = match helper.window() {
            Ok(w) => w,
            Err(e) => {
                let why = format!("cannot measure the collectors' cost ({e}); --max-kernel-cpu is not enforced");
                let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                s.cost.unmeasured = Some(why.clone());
                s.notice = Some(Notice::Unmeasured(why));
                return;
            }
        };
        // The collectors unloaded under the window: the run is ending.
        if after.iter().all(Option::is_none) {
            return;
        }
        let w = Window::between(&before, &after, wall);
        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
        if s.cost.add(&w) {
            s.cost.tripped = true;
            s.notice = Some(Notice::Overloaded(s.cost.overload_message(&w)));
            return;
        }
    }
}

/// The measuring process, seen from the host: its first line names the programs, then
/// one line out asks for a window, one line back answers it.
pub struct Meter {
    child: std::process::Child,
    /// Closed first when it is dropped: the process ends at the end of its input, which
    /// a host that has become a tenant's user (and may not signal it) can still cause.
    to: Option<std::process::ChildStdin>,
    from: std::io::BufReader<std::process::ChildStdout>,
}

impl Meter {
    /// Start the measuring process. Call before the host drops its privileges (it starts
    /// with them) and before the collectors load (they must know its pid to exclude it).
    pub fn spawn() -> Result<Meter, OverloadError> {
        Meter::start().map_err(OverloadError::Helper)
    }

    /// Its process id, for the collectors to leave out.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn start() -> std::io::Result<Meter> {
        use std::process::{Command, Stdio};
        let mut child = Command::new("/proc/self/exe")
            .arg("__collector-stats")
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (to, from) = match (child.stdin.take(), child.stdout.take()) {
            (Some(to), Some(from)) => (to, std::io::BufReader::new(from)),
            _ => return Err(std::io::Error::other("no pipes to the measuring process")),
        };
        Ok(Meter { child, to: Some(to), from })
    }

    /// Tell it the kernel's ids of the programs to measure.
    fn name(&mut self, programs: &[Program]) -> std::io::Result<()> {
        use std::io::Write;
        let ids: Vec<String> = programs.iter().map(|p| p.id.to_string()).collect();
        let to = self.to.as_mut().ok_or_else(|| std::io::Error::other("closed"))?;
        writeln!(to, "{}", ids.join(" ")).and_then(|()| to.flush())
    }

    /// One window: the readings before and after it, and its wall time.
    #[allow(clippy::type_complexity, reason = "two reading lists and a duration, unpacked at once by the caller")]
    fn window(&mut self) -> Result<(Vec<Option<Reading>>, Vec<Option<Reading>>, Duration), String> {
        use std::io::{BufRead, Write};
        let to = self.to.as_mut().ok_or("asking: closed")?;
        to.write_all(b"w\n").and_then(|()| to.flush()).map_err(|e| format!("asking: {e}"))?;
        let mut line = String::new();
        match self.from.read_line(&mut line) {
            Ok(0) => Err("the measuring process ended".into()),
            Ok(_) => parse_answer(&line),
            Err(e) => Err(format!("reading its answer: {e}")),
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        drop(self.to.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `WALL_NS NS RUNS NS RUNS ...`, a `- -` pair for a program the kernel no longer has:
/// the readings before the window, then after it.
fn answer(before: &[Option<Reading>], after: &[Option<Reading>], wall: Duration) -> String {
    let mut line = wall.as_nanos().to_string();
    for r in before.iter().chain(after) {
        match r {
            Some(r) => line += &format!(" {} {}", r.run_ns, r.runs),
            None => line += " - -",
        }
    }
    line
}

#[allow(clippy::type_complexity, reason = "the inverse of `answer`")]
fn parse_answer(line: &str) -> Result<(Vec<Option<Reading>>, Vec<Option<Reading>>, Duration), String> {
    let bad = || format!("a malformed answer {:?}", line.trim());
    let mut words = line.split_whitespace();
    let wall = Duration::from_nanos(words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?);
    let words: Vec<&str> = words.collect();
    if !words.len().is_multiple_of(4) {
        return Err(bad());
    }
    let readings: Vec<Option<Reading>> = words
        .chunks(2)
        .map(|pair| Some(Reading { run_ns: pair[0].parse().ok()?, runs: pair[1].parse().ok()? }))
        .collect();
    let after = readings[readings.len() / 2..].to_vec();
    let mut before = readings;
    before.truncate(after.len());
    Ok((before, after, wall))
}

/// The measuring process (`wasmtap __collector-stats`): keep `CAP_SYS_ADMIN` alone, read
/// the programs' ids from the first line, then for each line read, turn the kernel's
/// statistics on for one [`WINDOW`] and answer with the programs' counters before and
/// after it. Ends at the end of its input.
pub fn serve() -> Result<(), OverloadError> {
    use std::io::{BufRead, Write};
    crate::sys::creds::restrict_all_threads(1 << crate::sys::creds::CAP_SYS_ADMIN)
        .map_err(OverloadError::Privileges)?;
    let mut lines = std::io::stdin().lock().lines();
    let Some(Ok(first)) = lines.next() else {
        // The host ended before the collectors were loaded.
        return Ok(());
    };
    let ids: Option<Vec<u32>> = first.split_whitespace().map(|w| w.parse().ok()).collect();
    let programs: Vec<Program> =
        ids.ok_or(OverloadError::NoPrograms)?.into_iter().map(|id| Program { name: String::new(), id }).collect();
    let mut out = std::io::stdout().lock();
    for line in lines {
        if line.is_err() {
            break;
        }
        // Statistics stay on while this descriptor is open, and only then.
        let answer = match aya::sys::enable_stats(aya::sys::Stats::RunTime) {
            Ok(stats) => {
                let (before, t0) = (read(&programs), Instant::now());
                std::thread::sleep(WINDOW);
                let (after, wall) = (read(&programs), t0.elapsed());
                drop(stats);
                answer(&before, &after, wall)
            }
            // No answer: the host says the limit is not enforced.
            Err(_) => break,
        };
        if writeln!(out, "{answer}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    Ok(())
}

/// The programs' counters now, in their order; `None` for one the kernel no longer has.
fn read(programs: &[Program]) -> Vec<Option<Reading>> {
    let mut by_id = BTreeMap::new();
    for info in aya::programs::loaded_programs().flatten() {
        by_id.insert(info.id(), Reading { run_ns: info.run_time().as_nanos() as u64, runs: info.run_count() });
    }
    programs.iter().map(|p| by_id.get(&p.id).copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn programs() -> Vec<Program> {
        vec![Program { name: "wt_tracepoint".into(), id: 7 }, Program { name: "wt_sys_enter".into(), id: 9 }]
    }

    fn r(run_ns: u64, runs: u64) -> Option<Reading> {
        Some(Reading { run_ns, runs })
    }

    #[test]
    fn the_measuring_process_answers_in_one_line_that_reads_back() {
        let (before, after) = (vec![r(5, 1), None], vec![r(9, 3), None]);
        let line = answer(&before, &after, Duration::from_millis(150));
        assert_eq!(line, "150000000 5 1 - - 9 3 - -");
        assert_eq!(parse_answer(&line), Ok((before, after, Duration::from_millis(150))));
        assert!(parse_answer("150 1 2 3").is_err());
        assert!(parse_answer("").is_err());
    }

    #[test]
    fn share_is_run_time_over_wall_time_of_one_cpu() {
        assert_eq!(percent_of_cpu(15_000_000, Duration::from_millis(150)), 10.0);
        // Two CPUs busy in the programs for the whole window: 200 % of one CPU.
        assert_eq!(percent_of_cpu(300_000_000, Duration::from_millis(150)), 200.0);
        assert_eq!(percent_of_cpu(5, Duration::ZERO), 0.0);
    }

    #[test]
    fn a_window_counts_what_each_program_gained() {
        let w =
            Window::between(&[r(1_000, 10), r(50, 1)], &[r(3_001_000, 30_010), r(50, 1)], Duration::from_millis(100));
        assert_eq!(w.gained, vec![Reading { run_ns: 3_000_000, runs: 30_000 }, Reading::default()]);
        assert_eq!(w.percent(), 3.0);
    }

    #[test]
    fn a_program_gone_or_going_back_gains_nothing() {
        let w = Window::between(&[r(100, 1), None, r(900, 9)], &[None, r(5, 5), r(800, 8)], Duration::from_millis(1));
        assert_eq!(w.gained, vec![Reading::default(); 3]);
        assert_eq!(w.percent(), 0.0);
    }

    #[test]
    fn over_the_limit_trips_and_the_message_names_programs_cost_and_limit() {
        let mut cost = CollectorCost::new(&programs(), 1);
        let calm = Window::between(&[r(0, 0), r(0, 0)], &[r(1_000_000, 10_000), r(0, 0)], Duration::from_millis(150));
        assert!(!cost.add(&calm), "0.7% is under 1%");
        let busy = Window::between(
            &[r(0, 0), r(0, 0)],
            &[r(6_000_000, 40_000), r(1_500_000, 10_000)],
            Duration::from_millis(150),
        );
        assert!(cost.add(&busy), "5% is over 1%");
        assert_eq!(cost.windows, 2);
        assert_eq!(cost.last_percent, 5.0);
        assert_eq!(cost.peak_percent, 5.0);
        assert_eq!(cost.programs[0].runs, 50_000);
        assert_eq!(cost.programs[0].run_ns, 7_000_000);
        assert_eq!(cost.programs[0].peak_percent, 4.0);
        assert_eq!(
            cost.overload_message(&busy),
            "overload: the collectors used 5.0% of one CPU over 150 ms, more than --max-kernel-cpu 1%: \
             wt_tracepoint 4.0% (40000 runs, 150 ns each), wt_sys_enter 1.0% (10000 runs, 150 ns each); stopping the run"
        );
    }

    #[test]
    fn exactly_at_the_limit_does_not_trip() {
        let mut cost = CollectorCost::new(&programs(), 10);
        let w = Window::between(&[r(0, 0), r(0, 0)], &[r(15_000_000, 1), r(0, 0)], Duration::from_millis(150));
        assert!(!cost.add(&w));
    }

    #[test]
    fn the_guard_stops_at_once_and_reports_what_it_measured() {
        let started = Instant::now();
        let guard = Guard::start(Meter::spawn().unwrap(), programs(), 50).unwrap();
        assert_eq!(guard.poll(), None);
        let cost = guard.finish();
        assert!(started.elapsed() < FIRST, "stopping waits for no window");
        assert_eq!((cost.windows, cost.limit_percent, cost.programs.len()), (0, 50, 2));
    }
}
