//! The time a plugin sees: the machine's clocks in a live run, a recording's in a replay.

/// The time a plugin sees.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// Fixed CLOCK_MONOTONIC value (replay), or `None` for the real clock.
    pub fixed_mono_ns: Option<u64>,
    /// Wall-clock nanoseconds minus monotonic nanoseconds.
    pub wall_offset_ns: i128,
}

impl Clock {
    /// The machine's clocks.
    pub fn live() -> Clock {
        let mono = crate::sys::monotonic_ns();
        let wall = crate::sys::wall_ns();
        Clock { fixed_mono_ns: None, wall_offset_ns: wall as i128 - mono as i128 }
    }

    /// Monotonic nanoseconds now.
    pub fn mono_ns(&self) -> u64 {
        self.fixed_mono_ns.unwrap_or_else(crate::sys::monotonic_ns)
    }

    /// Wall-clock nanoseconds for a monotonic timestamp.
    pub fn wall_of(&self, mono_ns: u64) -> u64 {
        (mono_ns as i128 + self.wall_offset_ns).max(0) as u64
    }
}
