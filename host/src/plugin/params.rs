//! Plugin parameters: `--param [PLUGIN.]NAME=VALUE`, validated against what each plugin
//! declares, normalized, and completed with defaults.

use crate::wit::types::{Param, ParamKind, ParamSpec};

/// A `--param` as the user wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawParam {
    /// `Some("syscount")` for `--param syscount.top=5`.
    pub plugin: Option<String>,
    pub name: String,
    pub value: String,
}

/// Why parameters were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParamError {
    #[error("bad --param `{0}`: expected NAME=VALUE or PLUGIN.NAME=VALUE")]
    Syntax(String),
    #[error("unknown parameter `{name}` for {plugin} (it takes: {known})")]
    Unknown { plugin: String, name: String, known: String },
    #[error("bad value `{value}` for parameter `{name}` of {plugin}: expected {expected}")]
    BadValue { plugin: String, name: String, value: String, expected: &'static str },
    #[error("{plugin} needs parameter `{name}` ({description})")]
    Missing { plugin: String, name: String, description: String },
}

impl std::str::FromStr for RawParam {
    type Err = ParamError;
    fn from_str(s: &str) -> Result<Self, ParamError> {
        let (key, value) = s.split_once('=').ok_or_else(|| ParamError::Syntax(s.into()))?;
        let (plugin, name) = match key.split_once('.') {
            Some((p, n)) => (Some(p.to_string()), n.to_string()),
            None => (None, key.to_string()),
        };
        if name.is_empty() || plugin.as_deref() == Some("") {
            return Err(ParamError::Syntax(s.into()));
        }
        Ok(RawParam { plugin, name, value: value.to_string() })
    }
}

/// The parameters for one plugin: every declared one, validated, defaults filled in.
pub fn bind(plugin: &str, specs: &[ParamSpec], raw: &[RawParam]) -> Result<Vec<Param>, ParamError> {
    let mine: Vec<&RawParam> = raw.iter().filter(|p| p.plugin.as_deref().is_none_or(|n| n == plugin)).collect();
    for p in &mine {
        if p.plugin.is_some() && !specs.iter().any(|s| s.name == p.name) {
            return Err(unknown(plugin, specs, &p.name));
        }
    }
    specs
        .iter()
        .map(|spec| {
            let given = mine.iter().rev().find(|p| p.name == spec.name).map(|p| p.value.clone());
            let value = given.or_else(|| spec.default_value.clone()).ok_or_else(|| ParamError::Missing {
                plugin: plugin.into(),
                name: spec.name.clone(),
                description: spec.description.clone(),
            })?;
            let value = normalize(spec.kind, &value).ok_or_else(|| ParamError::BadValue {
                plugin: plugin.into(),
                name: spec.name.clone(),
                value: value.clone(),
                expected: expected(spec.kind),
            })?;
            Ok(Param { name: spec.name.clone(), value })
        })
        .collect()
}

/// Unqualified parameters that no plugin declares.
pub fn check_unclaimed(raw: &[RawParam], plugins: &[(String, Vec<ParamSpec>)]) -> Result<(), ParamError> {
    for p in raw.iter().filter(|p| p.plugin.is_none()) {
        if !plugins.iter().any(|(_, specs)| specs.iter().any(|s| s.name == p.name)) {
            let (name, specs) = plugins.first().map(|(n, s)| (n.as_str(), s.as_slice())).unwrap_or(("the plugin", &[]));
            return Err(unknown(name, specs, &p.name));
        }
    }
    for p in raw.iter().filter_map(|p| p.plugin.as_ref()) {
        if !plugins.iter().any(|(n, _)| n == p) {
            return Err(ParamError::Syntax(format!("{p}.…: no plugin named `{p}` in this run")));
        }
    }
    Ok(())
}

fn unknown(plugin: &str, specs: &[ParamSpec], name: &str) -> ParamError {
    let known = if specs.is_empty() {
        "no parameters".to_string()
    } else {
        specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
    };
    ParamError::Unknown { plugin: plugin.into(), name: name.into(), known }
}

fn expected(kind: ParamKind) -> &'static str {
    match kind {
        ParamKind::Integer => "an integer",
        ParamKind::Boolean => "true or false",
        ParamKind::Text => "text",
        ParamKind::Duration => "a duration such as 500ms, 2s or 1m",
    }
}

/// The canonical form of `value`, or `None` if it is not a valid `kind`.
pub fn normalize(kind: ParamKind, value: &str) -> Option<String> {
    let v = value.trim();
    match kind {
        ParamKind::Integer => v.parse::<i64>().ok().map(|i| i.to_string()),
        ParamKind::Boolean => match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Some("true".into()),
            "false" | "no" | "0" | "off" => Some("false".into()),
            _ => None,
        },
        ParamKind::Text => Some(value.to_string()),
        ParamKind::Duration => parse_duration(v).map(|d| d.as_nanos().to_string()),
    }
}

/// `500ms`, `2s`, `1.5s`, `3m`, `1h`, `250us`, `10ns`; a bare number is seconds. Decimals
/// are exact (`2.3ms` is 2300000 ns, not one less as a float would make it); fractions of a
/// nanosecond are dropped.
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let scale: u128 = match unit.trim() {
        "" | "s" | "sec" => 1_000_000_000,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    // 18 digits are exact: the rest cannot move the result by a whole nanosecond.
    let frac = &frac[..frac.len().min(18)];
    let frac_ns = if frac.is_empty() { 0 } else { frac.parse::<u128>().ok()? * scale / 10u128.pow(frac.len() as u32) };
    let ns = whole.checked_mul(scale)?.checked_add(frac_ns)?;
    Some(std::time::Duration::from_nanos(u64::try_from(ns).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, kind: ParamKind, default: Option<&str>) -> ParamSpec {
        ParamSpec { name: name.into(), kind, default_value: default.map(Into::into), description: "d".into() }
    }

    #[test]
    fn defaults_fill_in_and_values_normalize() {
        let specs = [spec("top", ParamKind::Integer, Some("10")), spec("every", ParamKind::Duration, Some("0"))];
        let raw = vec!["every=1s".parse().unwrap()];
        let got = bind("syscount", &specs, &raw).unwrap();
        assert_eq!(got[0].value, "10");
        assert_eq!(got[1].value, "1000000000");
    }

    #[test]
    fn bad_value_names_plugin_parameter_and_expectation() {
        let specs = [spec("top", ParamKind::Integer, Some("10"))];
        let raw = vec!["top=ten".parse().unwrap()];
        let e = bind("syscount", &specs, &raw).unwrap_err();
        assert_eq!(e.to_string(), "bad value `ten` for parameter `top` of syscount: expected an integer");
    }

    #[test]
    fn decimal_durations_are_exact() {
        let ns = |s: &str| parse_duration(s).map(|d| d.as_nanos());
        // Through f64, 2.3ms was 2299999 ns (found by host/tests/decoder_properties.rs).
        assert_eq!(
            (ns("2.3ms"), ns("0.1s"), ns(".5s"), ns("5."), ns("1.5ns")),
            (Some(2_300_000), Some(100_000_000), Some(500_000_000), Some(5_000_000_000), Some(1))
        );
        assert_eq!((ns("18446744073709551615ns"), ns("18446744073709551616ns")), (Some(u64::MAX.into()), None));
        assert_eq!(
            (ns("."), ns("1.2.3s"), ns(""), ns("-1s"), ns("1e3s"), ns("1 parsec")),
            (None, None, None, None, None, None)
        );
    }

    #[test]
    fn unclaimed_parameter_is_refused() {
        let plugins = vec![("syscount".to_string(), vec![spec("top", ParamKind::Integer, Some("10"))])];
        let e = check_unclaimed(&["tpo=3".parse().unwrap()], &plugins).unwrap_err();
        assert_eq!(e.to_string(), "unknown parameter `tpo` for syscount (it takes: top)");
        assert!("novalue".parse::<RawParam>().is_err());
    }
}
