//! Sizes of the collectors' bookkeeping maps, overridable with `WASMTAP_MAP_ENTRIES`:
//! `WASMTAP_MAP_ENTRIES=targets=64,agg_starts=16`. The defaults hold any real workload;
//! the override exists so that a test (or an operator checking the loss reports) can
//! fill a map on purpose and see every loss counted under its reason. Each map named is
//! resized, before load, in every collector that has it.

use std::fmt;

/// The variable read at start.
pub const ENV: &str = "WASMTAP_MAP_ENTRIES";

/// The maps that may be resized: (name in the variable, map in the collectors, default).
pub const MAPS: [(&str, &str, u32); 5] = [
    ("targets", "TARGETS", 16384),
    ("execs", "EXECS", 4096),
    ("opens", "OPENS", 10240),
    ("agg_starts", "AGG_STARTS", 65536),
    ("scoped_tids", "SCOPED_TIDS", 65536),
];

/// A value of `WASMTAP_MAP_ENTRIES` that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MapSizeError {
    #[error("{ENV}: `{0}` is not NAME=ENTRIES")]
    NotAPair(String),
    #[error("{ENV}: unknown map `{0}` (known: targets, execs, opens, agg_starts, scoped_tids)")]
    UnknownMap(String),
    #[error("{ENV}: `{0}` is not a number of entries from 1 to 1048576")]
    BadEntries(String),
}

/// Maps to resize: (map name in the collectors, entries).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapSizes(pub Vec<(&'static str, u32)>);

impl MapSizes {
    /// The sizes asked for in the environment; none if the variable is unset or empty.
    pub fn from_env() -> Result<MapSizes, MapSizeError> {
        match std::env::var(ENV) {
            Ok(v) => v.parse(),
            Err(_) => Ok(MapSizes::default()),
        }
    }
}

impl std::str::FromStr for MapSizes {
    type Err = MapSizeError;

    fn from_str(s: &str) -> Result<MapSizes, MapSizeError> {
        let mut out = Vec::new();
        for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, n) = pair.split_once('=').ok_or_else(|| MapSizeError::NotAPair(pair.to_string()))?;
            let (_, map, _) = MAPS
                .iter()
                .find(|(short, _, _)| *short == name.trim())
                .ok_or_else(|| MapSizeError::UnknownMap(name.trim().to_string()))?;
            // A bound, so that a typo cannot ask the kernel for gigabytes of map.
            let entries = n.trim().parse::<u32>().ok().filter(|n| (1..=1 << 20).contains(n));
            let entries = entries.ok_or_else(|| MapSizeError::BadEntries(n.trim().to_string()))?;
            out.push((*map, entries));
        }
        Ok(MapSizes(out))
    }
}

impl fmt::Display for MapSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(|(map, n)| format!("{map}={n}")).collect();
        f.write_str(&names.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_by_short_name() {
        let m: MapSizes = "targets=64, agg_starts=16,".parse().unwrap();
        assert_eq!(m.0, [("TARGETS", 64), ("AGG_STARTS", 16)]);
        assert_eq!(m.to_string(), "TARGETS=64,AGG_STARTS=16");
        assert_eq!("".parse::<MapSizes>(), Ok(MapSizes::default()));
    }

    #[test]
    fn bad_sizes_are_refused_by_what_is_wrong() {
        assert_eq!("targets".parse::<MapSizes>(), Err(MapSizeError::NotAPair("targets".into())));
        assert_eq!("events=4".parse::<MapSizes>(), Err(MapSizeError::UnknownMap("events".into())));
        assert_eq!("execs=0".parse::<MapSizes>(), Err(MapSizeError::BadEntries("0".into())));
        assert_eq!("opens=99999999".parse::<MapSizes>(), Err(MapSizeError::BadEntries("99999999".into())));
    }
}
