//! Bounds on what a plugin declares. Every size, count and width a plugin hands the host
//! in its `info` or its plan is host work it has not paid for (a column width is padding
//! written on every row, a name is printed on every heading), so each is checked here,
//! before anything is attached or rendered, and a refusal names the field, the value and
//! the limit.

use crate::wit::types::{Filter, Plan, PluginInfo};

/// Bytes of a name: a plugin version, a parameter, table, column or aggregation name,
/// a predicate's field.
pub const NAME_BYTES: usize = 64;
/// Bytes of a description, a parameter's default, a title.
pub const TEXT_BYTES: usize = 4096;
/// Parameters a plugin may declare.
pub const PARAMS: usize = 64;
/// Subscriptions in a plan.
pub const SUBSCRIPTIONS: usize = 1024;
/// Bytes of a probe name (uprobe and USDT names carry a path).
pub const PROBE_BYTES: usize = 4096;
/// Tables in a plan, and columns in a table.
pub const TABLES: usize = 64;
pub const COLUMNS: usize = 64;
/// Widest column: text rows are padded to it, in every output format's headings.
pub const COLUMN_WIDTH: u32 = 256;
/// Filter entries of one subscription.
pub const FILTER_UIDS: usize = 256;
pub const FILTER_COMMS: usize = 256;
pub const FILTER_PIDS: usize = 16384;
pub const FILTER_CGROUPS: usize = 64;
pub const FILTER_PREDICATES: usize = 64;

/// Why a declaration is refused: the field, what it holds, and the limit.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Exceeds {
    #[error("`{field}` is {value}, more than the limit of {limit}")]
    Size { field: String, value: u64, limit: u64 },
    #[error("`{field}` must not be empty")]
    Empty { field: String },
    #[error("`{field}` holds a control character")]
    Control { field: String },
}

fn size(field: impl FnOnce() -> String, value: usize, limit: usize) -> Result<(), Exceeds> {
    match value > limit {
        true => Err(Exceeds::Size { field: field(), value: value as u64, limit: limit as u64 }),
        false => Ok(()),
    }
}

/// A name printed to the user: bounded, and nothing that drives a terminal.
fn name(field: impl Fn() -> String, s: &str, limit: usize) -> Result<(), Exceeds> {
    size(&field, s.len(), limit)?;
    match s.chars().any(char::is_control) {
        true => Err(Exceeds::Control { field: field() }),
        false => Ok(()),
    }
}

/// Bounds on a plugin's `info`.
pub fn check_info(info: &PluginInfo) -> Result<(), Exceeds> {
    name(|| "info.version".into(), &info.version, NAME_BYTES)?;
    size(|| "info.description".into(), info.description.len(), TEXT_BYTES)?;
    size(|| "info.params".into(), info.params.len(), PARAMS)?;
    for (i, p) in info.params.iter().enumerate() {
        name(|| format!("info.params[{i}].name"), &p.name, NAME_BYTES)?;
        let default = p.default_value.as_deref().unwrap_or("");
        size(|| format!("info.params[{i}].default-value"), default.len(), TEXT_BYTES)?;
        size(|| format!("info.params[{i}].description"), p.description.len(), TEXT_BYTES)?;
    }
    Ok(())
}

/// Bounds on a plan's sizes and names. Probe names, filters and aggregations are checked
/// further where they are parsed and resolved.
pub fn check_plan(plan: &Plan) -> Result<(), Exceeds> {
    size(|| "subscriptions".into(), plan.subscriptions.len(), SUBSCRIPTIONS)?;
    for (i, s) in plan.subscriptions.iter().enumerate() {
        size(|| format!("subscriptions[{i}].probe"), s.probe.len(), PROBE_BYTES)?;
        check_filter(&format!("subscriptions[{i}].filter"), &s.filter)?;
    }
    size(|| "tables".into(), plan.tables.len(), TABLES)?;
    for (t, table) in plan.tables.iter().enumerate() {
        name(|| format!("tables[{t}].name"), &table.name, NAME_BYTES)?;
        if table.columns.is_empty() {
            return Err(Exceeds::Empty { field: format!("tables[{t}].columns") });
        }
        size(|| format!("tables[{t}].columns"), table.columns.len(), COLUMNS)?;
        for (c, col) in table.columns.iter().enumerate() {
            name(|| format!("tables[{t}].columns[{c}].name"), &col.name, NAME_BYTES)?;
            let width = || format!("tables[{t}].columns[{c}].width");
            size(width, col.width as usize, COLUMN_WIDTH as usize)?;
        }
    }
    size(|| "aggregations".into(), plan.aggregations.len(), crate::kernel_agg::PER_PLUGIN_MAX)?;
    for (a, agg) in plan.aggregations.iter().enumerate() {
        name(|| format!("aggregations[{a}].name"), &agg.name, NAME_BYTES)?;
        check_filter(&format!("aggregations[{a}].filter"), &agg.filter)?;
    }
    Ok(())
}

fn check_filter(at: &str, f: &Filter) -> Result<(), Exceeds> {
    size(|| format!("{at}.uids"), f.uids.len(), FILTER_UIDS)?;
    size(|| format!("{at}.comms"), f.comms.len(), FILTER_COMMS)?;
    size(|| format!("{at}.pids"), f.pids.len(), FILTER_PIDS)?;
    size(|| format!("{at}.cgroups"), f.cgroups.len(), FILTER_CGROUPS)?;
    size(|| format!("{at}.predicates"), f.predicates.len(), FILTER_PREDICATES)?;
    for (i, c) in f.comms.iter().enumerate() {
        size(|| format!("{at}.comms[{i}]"), c.len(), NAME_BYTES)?;
    }
    for (i, c) in f.cgroups.iter().enumerate() {
        size(|| format!("{at}.cgroups[{i}]"), c.len(), PROBE_BYTES)?;
    }
    for (i, p) in f.predicates.iter().enumerate() {
        size(|| format!("{at}.predicates[{i}].field"), p.field.len(), NAME_BYTES)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wit::types::{Column, ColumnKind, TableSpec};

    fn plan_with_width(width: u32) -> Plan {
        let columns = vec![Column { name: "N".into(), kind: ColumnKind::Integer, width }];
        Plan { subscriptions: vec![], tables: vec![TableSpec { name: "t".into(), columns }], aggregations: vec![] }
    }

    #[test]
    fn a_column_wider_than_the_limit_is_refused_naming_field_value_and_limit() {
        assert_eq!(check_plan(&plan_with_width(COLUMN_WIDTH)), Ok(()));
        let err = check_plan(&plan_with_width(3_000_000_000)).unwrap_err();
        assert_eq!(err.to_string(), "`tables[0].columns[0].width` is 3000000000, more than the limit of 256");
    }

    #[test]
    fn names_with_control_characters_are_refused() {
        let mut plan = plan_with_width(8);
        plan.tables[0].name = "t\x1b[2J".into();
        assert_eq!(check_plan(&plan).unwrap_err().to_string(), "`tables[0].name` holds a control character");
    }
}
