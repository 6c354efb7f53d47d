//! Parameter values as `start` receives them.

use crate::Param;

/// The parameters `start` receives, already validated and normalized by the host:
/// every declared parameter is present (the declared default fills in), integers are
/// decimal, booleans `true`/`false`, durations whole nanoseconds.
///
/// The typed getters never panic. A value that is missing or does not parse (which
/// means a host bug or a name the plugin never declared) reads as the kind's zero:
/// `0`, `false`, `""`.
#[derive(Clone, Debug, Default)]
pub struct Params {
    list: Vec<Param>,
}

impl Params {
    /// Wrap the list the host passed to `start`.
    pub fn new(list: Vec<Param>) -> Params {
        Params { list }
    }

    /// Build from `(name, value)` pairs; handy in a plugin's unit tests.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Params {
        let list = pairs
            .iter()
            .map(|(name, value)| Param { name: (*name).to_string(), value: (*value).to_string() })
            .collect();
        Params { list }
    }

    #[cfg(test)]
    pub(crate) fn into_list(self) -> Vec<Param> {
        self.list
    }

    /// The raw value of `name`, if the host passed one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.list.iter().find(|p| p.name == name).map(|p| p.value.as_str())
    }

    /// An `integer` parameter; `0` if missing or not a decimal `i64`.
    pub fn int(&self, name: &str) -> i64 {
        self.get(name).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }

    /// A `boolean` parameter; `false` unless the value is `true` (or `yes`, `1`).
    pub fn bool(&self, name: &str) -> bool {
        matches!(self.get(name).map(str::trim), Some("true" | "yes" | "1"))
    }

    /// A `text` parameter; `""` if missing.
    pub fn text(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    /// A `duration` parameter in nanoseconds; `0` if missing or not a whole number.
    pub fn duration_ns(&self, name: &str) -> u64 {
        self.get(name).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    }

    /// A `duration` parameter as a timer: `None` for 0 (off), the subscription
    /// `interval:ms:N` otherwise; shorter than a millisecond is an error naming `name`.
    pub fn timer(&self, name: &str) -> Result<Option<crate::Subscription>, String> {
        match self.duration_ns(name) {
            0 => Ok(None),
            ns if ns < 1_000_000 => Err(format!("{name}: must be 0 (off) or at least 1ms")),
            ns => Ok(Some(crate::Subscription::new(&format!("interval:ms:{}", ns / 1_000_000)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_getters_read_normalized_values() {
        let p = Params::from_pairs(&[("top", "25"), ("failed", "true"), ("name", "sh"), ("interval", "1000000000")]);
        assert_eq!(p.int("top"), 25);
        assert!(p.bool("failed"));
        assert_eq!(p.text("name"), "sh");
        assert_eq!(p.duration_ns("interval"), 1_000_000_000);
    }

    #[test]
    fn missing_or_garbled_values_read_as_zero() {
        let p = Params::from_pairs(&[("top", "ten"), ("failed", "maybe"), ("interval", "1s")]);
        assert_eq!(p.int("top"), 0);
        assert!(!p.bool("failed"));
        assert_eq!(p.duration_ns("interval"), 0);
        assert_eq!(p.int("absent"), 0);
        assert_eq!(p.text("absent"), "");
        assert_eq!(p.get("absent"), None);
    }

    #[test]
    fn timers_come_from_durations() {
        let p = Params::from_pairs(&[("off", "0"), ("short", "999999"), ("second", "1000000000")]);
        assert_eq!(p.timer("off"), Ok(None));
        assert_eq!(p.timer("short").unwrap_err(), "short: must be 0 (off) or at least 1ms");
        assert_eq!(p.timer("second").unwrap().unwrap().probe, "interval:ms:1000");
    }
}
