//! Supervision of a running plugin: its CPU and output budget per second, where it is in
//! its life, what a call cost the host, and what happens on a fault (disable, or restart
//! after a backoff that doubles, until a crash loop disables it).

use super::*;

/// How far a plugin is through its budget for the current second.
#[derive(Debug)]
pub(super) struct Budget {
    /// False in replays: their output must not depend on how fast the machine is.
    pub(super) enforced: bool,
    pub(super) window: Instant,
    pub(super) cpu_ns: u64,
    pub(super) output_bytes: u64,
    /// Over budget in this window: its events are dropped until the next.
    pub(super) over: bool,
    /// Windows in a row that went over.
    pub(super) strikes: u32,
    /// When the plugin's last call (and the host's work for it) ended.
    pub(super) last_work: Instant,
}

impl Budget {
    pub(super) fn new(enforced: bool) -> Budget {
        let now = Instant::now();
        Budget { enforced, window: now, cpu_ns: 0, output_bytes: 0, over: false, strikes: 0, last_work: now }
    }

    /// Start a new window if a second has passed.
    pub(super) fn roll(&mut self, now: Instant) {
        if now.duration_since(self.window) < Duration::from_secs(1) {
            return;
        }
        // A whole second passed with no call: a second within budget. A second the host
        // spent on the plugin's own work (a long report) does not count as one.
        let missed = now.duration_since(self.window) >= Duration::from_secs(2)
            && now.duration_since(self.last_work) >= Duration::from_secs(1);
        if !self.over || missed {
            self.strikes = 0;
        }
        self.window = now;
        self.cpu_ns = 0;
        self.output_bytes = 0;
        self.over = false;
    }
}

/// Where a plugin is in its life.
pub(super) enum Life {
    /// Since when (the run's clock: the recording's in a replay), and how many calls completed.
    Running {
        since_ns: u64,
        ok_calls: u64,
    },
    /// Faulted; restarts at `at_ns`.
    Restarting {
        at_ns: u64,
    },
    Disabled,
}

/// Host work done for a plugin, measured from [`HostWork::begin`] to [`HostWork::end`]:
/// the pipeline thread's CPU time and the bytes written.
pub(super) struct HostWork {
    pub(super) cpu_ns: u64,
    pub(super) written: u64,
}

impl HostWork {
    pub(super) fn begin(out: &Output) -> HostWork {
        HostWork { cpu_ns: crate::sys::thread_cpu_ns(), written: out.written() }
    }

    pub(super) fn end(self, out: &Output) -> (u64, u64) {
        (crate::sys::thread_cpu_ns().saturating_sub(self.cpu_ns), out.written() - self.written)
    }
}

/// The first restart waits this long; each fault in a row doubles it, up to [`BACKOFF_MAX`].
pub const BACKOFF_BASE: Duration = Duration::from_millis(50);
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A life this long resets the backoff.
pub(super) const HEALTHY_LIFE: Duration = Duration::from_secs(10);

impl Runner {
    /// Account for a call's result: output, budget, fault.
    pub(super) fn after_call<R>(&mut self, res: Result<R, Fault>, out: &mut Output, clock: &Clock) -> Option<R> {
        if let Some(inst) = &self.instance {
            self.memory_peak = self.memory_peak.max(inst.memory_bytes());
        }
        match res {
            Ok(r) => {
                if let Life::Running { ok_calls, .. } = &mut self.life {
                    *ok_calls += 1;
                }
                self.render(out, clock);
                self.charge(out);
                Some(r)
            }
            Err(f) => {
                self.fault(f, out, clock);
                None
            }
        }
    }

    /// Charge the last call's CPU time and output to the budget; over it, the plugin's
    /// events are dropped for the rest of the second, and too many seconds in a row
    /// disable it.
    pub(super) fn charge(&mut self, out: &mut Output) {
        let Some(inst) = self.instance.as_ref() else { return };
        let cpu = inst.meter().cpu_ns;
        let host = self.host_cpu_ns - self.host_cpu_charged_ns;
        let spent = cpu.saturating_sub(self.cpu_charged_ns) + host;
        self.cpu_charged_ns = cpu;
        self.host_cpu_charged_ns = self.host_cpu_ns;
        self.budget.last_work = Instant::now();
        if !self.budget.enforced {
            return;
        }
        self.budget.cpu_ns += spent;
        let cpu_over = self.budget.cpu_ns > self.limits.cpu_ms_per_sec * 1_000_000;
        let output_over = self.budget.output_bytes >= self.limits.output_bytes_per_sec;
        if self.budget.over || !(cpu_over || output_over) {
            return;
        }
        self.budget.over = true;
        self.budget.strikes += 1;
        self.stats.budget_overruns += 1;
        let what = if cpu_over {
            format!("CPU budget ({} ms per second)", self.limits.cpu_ms_per_sec)
        } else {
            format!("output budget ({} KiB per second)", self.limits.output_bytes_per_sec >> 10)
        };
        if self.budget.strikes >= crate::limits::BUDGET_STRIKES {
            let why = format!("over its {what} for {} seconds in a row", self.budget.strikes);
            self.disable_for(&why, out);
            return;
        }
        out.diag(&format!(
            "plugin `{}` is over its {what}: its events are dropped until the next second ({} of {} strikes)",
            self.info.name,
            self.budget.strikes,
            crate::limits::BUDGET_STRIKES
        ));
    }

    /// Discard the faulted instance; restart it later or disable it, as its policy says.
    pub(super) fn fault(&mut self, fault: Fault, out: &mut Output, clock: &Clock) {
        if let Some(inst) = self.instance.take() {
            self.retire(&inst);
        }
        self.stats.faults += 1;
        self.stats.last_fault = Some(FaultReport {
            callback: fault.callback,
            kind: fault.kind,
            reason: fault.reason.clone(),
            elapsed_ms: fault.elapsed.as_millis() as u64,
        });
        let now_ns = clock.mono_ns();
        let (lived, ok_calls) = match self.life {
            Life::Running { since_ns, ok_calls } => (Duration::from_nanos(now_ns.saturating_sub(since_ns)), ok_calls),
            _ => (Duration::ZERO, 0),
        };
        self.crash_streak = if ok_calls > 0 { 0 } else { self.crash_streak + 1 };
        let name = &self.info.name;
        if self.limits.on_fault == OnFault::Disable {
            out.diag(&format!("plugin `{name}` disabled {fault}"));
            self.stats.disabled = Some(fault.to_string());
            self.life = Life::Disabled;
            return;
        }
        if self.crash_streak > self.limits.crash_loop {
            let why = format!(
                "crash loop: {} faults in a row before completing a call (limit {}); last {fault}",
                self.crash_streak, self.limits.crash_loop
            );
            out.diag(&format!("plugin `{name}` disabled: {why}"));
            self.stats.disabled = Some(why);
            self.life = Life::Disabled;
            return;
        }
        self.backoff_exp = if lived >= HEALTHY_LIFE { 0 } else { self.backoff_exp };
        let delay = BACKOFF_BASE.saturating_mul(1 << self.backoff_exp.min(16)).min(BACKOFF_MAX);
        self.backoff_exp += 1;
        out.diag(&format!("plugin `{name}` faulted {fault}; restarting in {} ms", delay.as_millis()));
        self.life = Life::Restarting { at_ns: now_ns.saturating_add(delay.as_nanos() as u64) };
    }

    /// A new instance from the compiled plugin, started with the same parameters. It
    /// must ask for the same plan: the probes are attached already.
    pub(super) fn restart(&mut self, out: &mut Output, clock: &Clock) {
        self.stats.restarts += 1;
        let mut inst = match self.loaded.instantiate(*clock, &self.limits) {
            Ok(inst) => inst,
            Err(f) => return self.fault(f, out, clock),
        };
        self.life = Life::Running { since_ns: clock.mono_ns(), ok_calls: 0 };
        crate::watchdog::calling(&self.info.name, "start");
        match inst.start(&self.params) {
            Ok(Ok(plan)) if plan == self.original_plan() => {}
            Ok(Ok(_)) => return self.disable_for("asked for a different plan when restarted", out),
            Ok(Err(message)) => return self.disable_for(&format!("refused to restart: {message}"), out),
            Err(f) => {
                self.instance = Some(inst);
                return self.fault(f, out, clock);
            }
        }
        self.cpu_charged_ns = 0;
        inst.set_schemas(self.schemas.clone());
        inst.set_symbol_scope(self.scope.clone());
        if let Some(aggs) = &self.aggs_reader {
            inst.set_aggregates(Box::new(aggs.clone()));
        }
        self.instance = Some(inst);
    }

    /// The plan as the plugin returned it (without the host's hidden subscriptions).
    pub(super) fn original_plan(&self) -> Plan {
        let mut plan = self.plan.clone();
        plan.subscriptions.truncate(self.own_subs);
        plan
    }

    pub(super) fn disable_for(&mut self, why: &str, out: &mut Output) {
        out.diag(&format!("plugin `{}` disabled: {why}", self.info.name));
        self.stats.disabled = Some(why.to_string());
        if let Some(inst) = self.instance.take() {
            self.retire(&inst);
        }
        self.life = Life::Disabled;
    }

    /// Keep what a discarded instance cost.
    pub(super) fn retire(&mut self, inst: &Instance) {
        self.cpu_base_ns += inst.meter().cpu_ns;
        self.cpu_charged_ns = 0;
        self.stats.longest_call_ms = self.stats.longest_call_ms.max(inst.meter().longest.as_millis() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_strikes_count_consecutive_seconds_over() {
        let t0 = Instant::now();
        let mut b = Budget::new(true);
        b.window = t0;
        b.over = true;
        b.strikes = 1;
        // The next second starts clean but remembers the strike.
        b.roll(t0 + Duration::from_millis(1000));
        assert_eq!((b.over, b.strikes, b.cpu_ns, b.output_bytes), (false, 1, 0, 0));
        // A second within budget forgives it.
        b.roll(t0 + Duration::from_millis(2000));
        assert_eq!(b.strikes, 0);
        // Seconds with no call at all in between are seconds within budget.
        b.over = true;
        b.strikes = 2;
        b.roll(t0 + Duration::from_millis(4500));
        assert_eq!(b.strikes, 0);
        // Within the same second nothing changes.
        b.over = true;
        b.roll(t0 + Duration::from_millis(4900));
        assert!(b.over);
        // Two seconds the host spent on the plugin's own work are not seconds within budget.
        b.strikes = 1;
        b.last_work = t0 + Duration::from_millis(6500);
        b.roll(t0 + Duration::from_millis(7000));
        assert_eq!(b.strikes, 1);
    }
}
