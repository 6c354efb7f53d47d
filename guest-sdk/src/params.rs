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

    /// A `text` parameter listing syscalls by name, comma-separated (`openat,read`), as
    /// the names a [`Filter`](crate::Filter)'s `syscalls` takes; empty is none (no
    /// filter). An unknown name is the error `"{name}: no x86_64 syscall named 'opne'"`.
    pub fn syscalls(&self, name: &str) -> Result<Vec<String>, String> {
        crate::Syscall::parse_list(self.text(name)).map_err(|e| format!("{name}: {e}"))
    }

    /// A `text` parameter that names one of a few options, as the value `options`
    /// pairs it with; anything else is the error ``"{name}: `{value}` is not a, b or c"``.
    ///
    /// ```
    /// # use wasmtap_sdk::Params;
    /// #[derive(Clone, Copy, Debug, PartialEq)]
    /// enum Mode { Kernel, Stream }
    /// let modes = [("kernel", Mode::Kernel), ("stream", Mode::Stream)];
    /// let p = Params::from_pairs(&[("mode", "stream"), ("bad", "fast")]);
    /// assert_eq!(p.choice("mode", &modes), Ok(Mode::Stream));
    /// assert_eq!(p.choice("bad", &modes).unwrap_err(), "bad: `fast` is not kernel or stream");
    /// ```
    pub fn choice<T: Copy>(&self, name: &str, options: &[(&str, T)]) -> Result<T, String> {
        let value = self.text(name);
        match options.iter().find(|(option, _)| *option == value) {
            Some((_, chosen)) => Ok(*chosen),
            None => Err(format!("{name}: `{value}` is not {}", one_of(options.iter().map(|(o, _)| *o)))),
        }
    }

    /// A `text` parameter that names one or more of `options`, comma-separated
    /// (`kernel,user`): which were named, in the order of `options`. A part that is
    /// not an option is the error ``"{name}: `{part}` is not a or b"``; naming none is
    /// `"{name}: name a, b or both"`.
    ///
    /// ```
    /// # use wasmtap_sdk::Params;
    /// let p = Params::from_pairs(&[("stacks", "user, kernel"), ("by", "")]);
    /// assert_eq!(p.choices("stacks", ["kernel", "user"]), Ok([true, true]));
    /// assert_eq!(p.choices("by", ["syscall", "process"]).unwrap_err(), "by: name syscall, process or both");
    /// ```
    pub fn choices<const N: usize>(&self, name: &str, options: [&str; N]) -> Result<[bool; N], String> {
        let mut named = [false; N];
        for part in self.text(name).split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match options.iter().position(|o| *o == part) {
                Some(i) => named[i] = true,
                None => return Err(format!("{name}: `{part}` is not {}", one_of(options.iter().copied()))),
            }
        }
        if named.contains(&true) {
            return Ok(named);
        }
        Err(match &options[..] {
            [a, b] => format!("{name}: name {a}, {b} or both"),
            _ => format!("{name}: name at least one of {}", one_of(options.iter().copied())),
        })
    }
}

/// `a`, `a or b`, `a, b or c`.
fn one_of<'a>(options: impl ExactSizeIterator<Item = &'a str>) -> String {
    let last = options.len().saturating_sub(1);
    let mut list = String::new();
    for (i, option) in options.enumerate() {
        list.push_str(match i {
            0 => "",
            i if i == last => " or ",
            _ => ", ",
        });
        list.push_str(option);
    }
    list
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

    #[test]
    fn a_choice_is_one_of_its_options() {
        let modes = [("kernel", 0), ("stream", 1), ("compare", 2)];
        let p = Params::from_pairs(&[("mode", "compare"), ("fast", "fast"), ("empty", "")]);
        assert_eq!(p.choice("mode", &modes), Ok(2));
        assert_eq!(p.choice("fast", &modes).unwrap_err(), "fast: `fast` is not kernel, stream or compare");
        assert_eq!(p.choice("empty", &modes[..2]).unwrap_err(), "empty: `` is not kernel or stream");
        assert_eq!(p.choice("mode", &[("compare", 'c')]), Ok('c'));
        assert_eq!(p.choice("fast", &[("one", 1)]).unwrap_err(), "fast: `fast` is not one");
    }

    #[test]
    fn choices_name_one_or_more_options() {
        let p = Params::from_pairs(&[("by", "process"), ("both", " process , syscall,,"), ("typo", "syscall,proces")]);
        assert_eq!(p.choices("by", ["syscall", "process"]), Ok([false, true]));
        assert_eq!(p.choices("both", ["syscall", "process"]), Ok([true, true]));
        assert_eq!(p.choices("typo", ["syscall", "process"]).unwrap_err(), "typo: `proces` is not syscall or process");
        assert_eq!(p.choices("absent", ["kernel", "user"]).unwrap_err(), "absent: name kernel, user or both");
        assert_eq!(p.choices("absent", ["a", "b", "c"]).unwrap_err(), "absent: name at least one of a, b or c");
        assert_eq!(p.choices("by", ["process"]), Ok([true]));
    }

    #[test]
    fn syscall_lists_become_checked_names() {
        let p = Params::from_pairs(&[("syscall", "read, write,,openat"), ("none", ""), ("typo", "read,opne")]);
        assert_eq!(p.syscalls("syscall"), Ok(vec!["read".into(), "write".into(), "openat".into()]));
        assert_eq!(p.syscalls("none"), Ok(vec![]));
        assert_eq!(p.syscalls("typo").unwrap_err(), "typo: no x86_64 syscall named 'opne'");
    }
}
