//! The periodic report: a `duration` parameter that becomes a timer subscription, and
//! the check, at each tick, that the tick is that timer's.

use crate::{Params, Subscription};

/// A plugin's report timer, made from one of its `duration` parameters (`interval`):
/// the classic `interval:s:1 { print(@); clear(@); }`. It remembers which subscription
/// of the plan the timer is, so that [`Plugin::on_tick`](crate::Plugin::on_tick) can
/// tell its ticks from those of other timers and of `begin`/`end`.
///
/// ```
/// use wasmtap_sdk::{Interval, Params, Subscription};
/// let params = Params::from_pairs(&[("interval", "1000000000")]);
/// let mut subs = vec![Subscription::new("proc:exec")];
/// let interval = Interval::optional(&params, "interval", &mut subs).unwrap();
/// assert_eq!(subs[1].probe, "interval:ms:1000");
/// assert!(interval.fired(1) && !interval.fired(0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    sub: Option<u32>,
}

impl Interval {
    /// No timer: [`fired`](Interval::fired) is never true.
    pub const fn off() -> Interval {
        Interval { sub: None }
    }

    /// The `duration` parameter `name` as a timer that may be off: 0 is off, anything
    /// else is pushed onto `subs` as `interval:ms:N`. Shorter than a millisecond is the
    /// error `"{name}: must be 0 (off) or at least 1ms"` (as [`Params::timer`]).
    pub fn optional(params: &Params, name: &str, subs: &mut Vec<Subscription>) -> Result<Interval, String> {
        Ok(match params.timer(name)? {
            Some(timer) => Interval::push(timer, subs),
            None => Interval::off(),
        })
    }

    /// The `duration` parameter `name` as a timer that must run: pushed onto `subs` as
    /// `interval:ms:N`; 0 or shorter than a millisecond is the error
    /// `"{name}: must be at least 1ms"`.
    pub fn required(params: &Params, name: &str, subs: &mut Vec<Subscription>) -> Result<Interval, String> {
        match params.timer(name) {
            Ok(Some(timer)) => Ok(Interval::push(timer, subs)),
            _ => Err(format!("{name}: must be at least 1ms")),
        }
    }

    fn push(timer: Subscription, subs: &mut Vec<Subscription>) -> Interval {
        subs.push(timer);
        Interval { sub: Some(subs.len() as u32 - 1) }
    }

    /// The timer runs.
    pub fn is_on(self) -> bool {
        self.sub.is_some()
    }

    /// The timer's subscription: its index in the plan.
    pub fn sub(self) -> Option<u32> {
        self.sub
    }

    /// The tick of subscription `sub` (`on_tick`'s first argument) is this timer's.
    pub fn fired(self, sub: u32) -> bool {
        self.sub == Some(sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs() -> Vec<Subscription> {
        vec![Subscription::new("proc:exec"), Subscription::new("proc:exit")]
    }

    #[test]
    fn an_optional_interval_subscribes_after_the_others_or_is_off() {
        let p = Params::from_pairs(&[("every", "1500000000"), ("off", "0"), ("short", "999999")]);
        let mut s = subs();
        let every = Interval::optional(&p, "every", &mut s).unwrap();
        assert_eq!((s.len(), s[2].probe.as_str(), every.sub()), (3, "interval:ms:1500", Some(2)));
        assert!(every.is_on() && every.fired(2) && !every.fired(0));
        let mut s = subs();
        let off = Interval::optional(&p, "off", &mut s).unwrap();
        assert_eq!((s.len(), off, off.is_on()), (2, Interval::off(), false));
        assert!(!(0..4).any(|sub| off.fired(sub)));
        assert_eq!(Interval::optional(&p, "short", &mut s).unwrap_err(), "short: must be 0 (off) or at least 1ms");
        assert_eq!(s.len(), 2, "nothing subscribed on an error");
    }

    #[test]
    fn a_required_interval_refuses_off_and_too_short() {
        let p = Params::from_pairs(&[("interval", "200000000"), ("off", "0"), ("short", "999999")]);
        let mut s = Vec::new();
        let iv = Interval::required(&p, "interval", &mut s).unwrap();
        assert_eq!((s[0].probe.as_str(), iv.sub()), ("interval:ms:200", Some(0)));
        assert_eq!(Interval::required(&p, "off", &mut s).unwrap_err(), "off: must be at least 1ms");
        assert_eq!(Interval::required(&p, "short", &mut s).unwrap_err(), "short: must be at least 1ms");
        assert_eq!(s.len(), 1);
    }
}
