//! Pushdown: a block whose every statement is an aggregation the kernel can compute, on
//! one tracepoint, with a predicate of comparisons on the tracepoint's numeric fields,
//! runs whole in the kernel as kernel aggregations; no event of it is streamed.
//!
//! Not pushed down (streamed to the interpreter, which computes the same result): `avg()`,
//! keys or values that are not a builtin the kernel knows (`comm`, `pid`, `tid`, `uid`,
//! `cgroup`) or a field, predicates on anything but fields (a run's kernel aggregations
//! share one pid, uid and comm filter), a map used anywhere else (read, printed, cleared),
//! blocks on several probes, on timers, or with other statements.

use std::collections::HashMap;

use wasmtap_sdk::{AggKind, AggSource, CmpOp, Correlation, Filter, KernelAggregation, Predicate};

use crate::parse::{Block, Expr, Fold, Op, Stmt, B};

/// Comparisons a kernel filter holds.
const PREDICATES_MAX: usize = 4;
/// Kernel aggregations a plugin may declare.
const AGGREGATIONS_MAX: usize = 32;

/// A map computed in the kernel.
pub struct Pushed {
    pub map: String,
    pub aggregation: KernelAggregation,
    pub kind: AggKind,
    pub keys: usize,
}

/// How many times each map is named in the program.
pub fn uses(blocks: &[Block]) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for b in blocks {
        if let Some(p) = &b.pred {
            expr_uses(p, &mut n);
        }
        stmt_uses(&b.body, &mut n);
    }
    n
}

fn stmt_uses(body: &[Stmt], n: &mut HashMap<String, usize>) {
    for s in body {
        let (map, exprs): (Option<&String>, Vec<&Expr>) = match s {
            Stmt::Aggregate { map, keys, value, .. } => (Some(map), keys.iter().chain(value).collect()),
            Stmt::Store { map, keys, value, .. } => (Some(map), keys.iter().chain([value]).collect()),
            Stmt::Let { value, .. } => (None, vec![value]),
            Stmt::Printf { args, .. } => (None, args.iter().collect()),
            Stmt::Print { map, .. } | Stmt::Clear { map, .. } | Stmt::Zero { map, .. } => (Some(map), Vec::new()),
            Stmt::Delete { map, keys, .. } => (Some(map), keys.iter().collect()),
            Stmt::If { cond, then, otherwise } => {
                expr_uses(cond, n);
                stmt_uses(then, n);
                stmt_uses(otherwise, n);
                (None, Vec::new())
            }
            Stmt::Expr(e) => (None, vec![e]),
            Stmt::While { cond, body } => {
                expr_uses(cond, n);
                stmt_uses(body, n);
                (None, Vec::new())
            }
            Stmt::For { from, to, body, .. } => {
                expr_uses(from, n);
                expr_uses(to, n);
                stmt_uses(body, n);
                (None, Vec::new())
            }
            Stmt::Unroll { body, .. } => {
                stmt_uses(body, n);
                (None, Vec::new())
            }
            Stmt::Exit | Stmt::Time(_) | Stmt::Break | Stmt::Continue => (None, Vec::new()),
        };
        if let Some(m) = map {
            *n.entry(m.clone()).or_default() += 1;
        }
        for e in exprs {
            expr_uses(e, n);
        }
    }
}

fn expr_uses(e: &Expr, n: &mut HashMap<String, usize>) {
    match e {
        Expr::Map { map, keys, .. } => {
            *n.entry(map.clone()).or_default() += 1;
            keys.iter().for_each(|k| expr_uses(k, n));
        }
        Expr::Unary(_, a) | Expr::Str1(a, None) => expr_uses(a, n),
        Expr::Str1(a, Some(b)) => {
            expr_uses(a, n);
            expr_uses(b, n);
        }
        Expr::Binary(_, a, b, _) => {
            expr_uses(a, n);
            expr_uses(b, n);
        }
        Expr::Ternary(a, b, c) => {
            expr_uses(a, n);
            expr_uses(b, n);
            expr_uses(c, n);
        }
        Expr::Call(_, args, _) => args.iter().for_each(|a| expr_uses(a, n)),
        _ => {}
    }
}

/// The kernel aggregations that compute block `block` on `probe` (a subscription's
/// probe), or why it is streamed. `args` are the positional parameters.
pub fn block(
    block: &Block,
    probe: &str,
    uses: &HashMap<String, usize>,
    args: &[String],
    text: &Text<'_>,
) -> Result<Vec<Pushed>, String> {
    if !probe.starts_with("tracepoint:") {
        return Err("not a tracepoint".into());
    }
    if block.probes.len() != 1 {
        return Err("several probes".into());
    }
    let filter = match &block.pred {
        Some(p) => {
            let mut f = Filter::default();
            predicates(p, args, &mut f.predicates)?;
            if f.predicates.len() > PREDICATES_MAX {
                return Err(format!("more than {PREDICATES_MAX} comparisons"));
            }
            f
        }
        None => Filter::default(),
    };
    let mut out = Vec::new();
    for s in &block.body {
        let Stmt::Aggregate { map, keys, fold, value, .. } = s else {
            return Err("a statement that is not an aggregation".into());
        };
        if uses.get(map).copied().unwrap_or(0) != 1 {
            return Err(format!("@{map} is used elsewhere"));
        }
        for e in keys.iter().chain(value) {
            numeric(e, probe, text)?;
        }
        let sources = keys.iter().map(source).collect::<Result<Vec<_>, _>>()?;
        if sources.len() > 4 || sources.iter().filter(|s| matches!(s, AggSource::Comm)).count() > 1 {
            return Err("more than four key parts, or two comms".into());
        }
        let value = match value {
            Some(v) => match source(v)? {
                AggSource::Comm => return Err("comm is not a number".into()),
                s => s,
            },
            None => AggSource::Pid,
        };
        // Named as the map, for messages and the accounting of its losses.
        let name = format!("@{map}");
        let (mut agg, kind) = match fold {
            Fold::Count => (KernelAggregation::count(&name, probe), AggKind::Count),
            Fold::Sum => (KernelAggregation::sum(&name, probe, value), AggKind::Sum),
            Fold::Min => (KernelAggregation::min(&name, probe, value), AggKind::Min),
            Fold::Max => (KernelAggregation::max(&name, probe, value), AggKind::Max),
            Fold::Hist => (KernelAggregation::log2_histogram(&name, probe, value), AggKind::Quantize),
            Fold::Lhist(min, max, step) => {
                (KernelAggregation::linear_histogram(&name, probe, value, *min, *max, *step), AggKind::Lquantize)
            }
            Fold::Avg | Fold::Stats => return Err(format!("{}() is computed in the sandbox", fold_name(fold))),
        };
        for s in sources {
            agg = agg.by(s);
        }
        agg = agg.with_filter(filter.clone());
        out.push(Pushed { map: map.clone(), aggregation: agg, kind, keys: keys.len() });
    }
    if out.is_empty() {
        return Err("nothing to aggregate".into());
    }
    Ok(out)
}

/// The latency pattern: a block that only stamps `@S[tid] = nsecs` on one tracepoint,
/// and a block on another whose aggregations take `nsecs - @S[tid]` (with `/@S[tid]/` in
/// its predicate and `delete(@S[tid])` allowed), `@S` used nowhere else. Both run in the
/// kernel as latency aggregations, the start kept with the thread: `Some((start block,
/// end block, the end's maps))` for each pair found.
pub fn latencies(
    blocks: &[Block],
    probes: &[String],
    uses: &HashMap<String, usize>,
    args: &[String],
    text: &Text<'_>,
) -> Vec<(usize, usize, Vec<Pushed>)> {
    let mut out = Vec::new();
    for (a, start) in blocks.iter().enumerate() {
        let [Stmt::Store { map: stamp, keys, op: None, value: Expr::Builtin(now, _), .. }] = start.body.as_slice()
        else {
            continue;
        };
        if *now != B::Nsecs || !is_tid(keys) || start.probes.len() != 1 || !probes[a].starts_with("tracepoint:") {
            continue;
        }
        let start_filter = match &start.pred {
            Some(p) => match filter_fields(p, args) {
                Some(f) => f,
                None => continue,
            },
            None => Filter::default(),
        };
        for (b, end) in blocks.iter().enumerate() {
            if b == a || end.probes.len() != 1 || !probes[b].starts_with("tracepoint:") {
                continue;
            }
            if let Some((maps, used)) = latency_end(end, &probes[b], stamp, &probes[a], &start_filter, args, text) {
                if uses.get(stamp).copied() == Some(used + 1) && maps.iter().all(|m| uses.get(&m.map) == Some(&1)) {
                    out.push((a, b, maps));
                }
            }
        }
    }
    out
}

fn is_tid(keys: &[Expr]) -> bool {
    matches!(keys, [Expr::Builtin(B::Tid, _)])
}

/// `@stamp[tid]`.
fn is_stamp(e: &Expr, stamp: &str) -> bool {
    matches!(e, Expr::Map { map, keys, .. } if map == stamp && is_tid(keys))
}

/// The end block's aggregations, and how many times it names `@stamp`.
fn latency_end(
    end: &Block,
    probe: &str,
    stamp: &str,
    start_probe: &str,
    start_filter: &Filter,
    args: &[String],
    text: &Text<'_>,
) -> Option<(Vec<Pushed>, usize)> {
    let mut used = 0;
    let mut filter = Filter::default();
    if let Some(p) = &end.pred {
        let mut parts = Vec::new();
        conjuncts(p, &mut parts);
        for part in parts {
            if is_stamp(part, stamp) {
                used += 1;
            } else {
                predicates(part, args, &mut filter.predicates).ok()?;
            }
        }
        if filter.predicates.len() > PREDICATES_MAX {
            return None;
        }
    }
    let mut maps = Vec::new();
    for s in &end.body {
        match s {
            Stmt::Delete { map, keys, .. } if map == stamp && is_tid(keys) => used += 1,
            Stmt::Aggregate { map, keys, fold, value: Some(Expr::Binary(Op::Sub, now, since, _)), .. }
                if matches!(&**now, Expr::Builtin(B::Nsecs, _)) && is_stamp(since, stamp) =>
            {
                used += 1;
                let name = format!("@{map}");
                let (mut agg, kind) = match fold {
                    Fold::Sum => (KernelAggregation::sum(&name, probe, AggSource::Latency), AggKind::Sum),
                    Fold::Min => (KernelAggregation::min(&name, probe, AggSource::Latency), AggKind::Min),
                    Fold::Max => (KernelAggregation::max(&name, probe, AggSource::Latency), AggKind::Max),
                    Fold::Hist => {
                        (KernelAggregation::log2_histogram(&name, probe, AggSource::Latency), AggKind::Quantize)
                    }
                    Fold::Lhist(min, max, step) => (
                        KernelAggregation::linear_histogram(&name, probe, AggSource::Latency, *min, *max, *step),
                        AggKind::Lquantize,
                    ),
                    Fold::Count | Fold::Avg | Fold::Stats => return None,
                };
                for k in keys {
                    numeric(k, probe, text).ok()?;
                    agg = agg.by(source(k).ok()?);
                }
                agg = agg
                    .with_filter(filter.clone())
                    .latency_from(start_probe, Correlation::Tid, Correlation::Tid)
                    .start_filter(start_filter.clone());
                maps.push(Pushed { map: map.clone(), aggregation: agg, kind, keys: keys.len() });
            }
            _ => return None,
        }
    }
    (!maps.is_empty()).then_some((maps, used))
}

/// A predicate of field comparisons only, as a filter.
fn filter_fields(pred: &Expr, args: &[String]) -> Option<Filter> {
    let mut f = Filter::default();
    predicates(pred, args, &mut f.predicates).ok()?;
    (f.predicates.len() <= PREDICATES_MAX).then_some(f)
}

/// Whether `n` more kernel aggregations fit beside `have`.
pub fn fits(have: usize, n: usize) -> bool {
    have + n <= AGGREGATIONS_MAX
}

/// Whether field `field` of tracepoint `probe` is text (a string, bytes, an array), as
/// its layout says: kernel aggregations key on numbers only.
pub type Text<'a> = dyn Fn(&str, &str) -> bool + 'a;

/// `e` is no tracepoint field that is text.
fn numeric(e: &Expr, probe: &str, text: &Text<'_>) -> Result<(), String> {
    match e {
        Expr::Arg(f, _) if text(probe, f) => {
            Err(format!("`args.{f}` is text, and kernel aggregations count by numbers"))
        }
        _ => Ok(()),
    }
}

fn source(e: &Expr) -> Result<AggSource, String> {
    Ok(match e {
        Expr::Builtin(b, _) => match b {
            B::Comm => AggSource::Comm,
            B::Pid => AggSource::Pid,
            B::Tid => AggSource::Tid,
            B::Uid => AggSource::Uid,
            B::Cgroup => AggSource::Cgroup,
            other => return Err(format!("`{}` is not known in the kernel", format!("{other:?}").to_lowercase())),
        },
        Expr::Arg(f, _) => AggSource::Field(f.clone()),
        _ => return Err("a key or value that is an expression".into()),
    })
}

/// The kernel filter for a streamed block's probe: its predicate, when it is a
/// conjunction of comparisons of fields with constants and of `comm`, `pid` or `uid`
/// equal to a constant (one each). The interpreter still checks the whole predicate;
/// the filter only spares the events it would refuse the trip out of the kernel.
pub fn filter(pred: &Expr, args: &[String]) -> Option<Filter> {
    let mut f = Filter::default();
    let mut parts = Vec::new();
    conjuncts(pred, &mut parts);
    for part in parts {
        let task = match part {
            Expr::Binary(Op::Eq, a, b, _) => match (&**a, &**b) {
                (Expr::Builtin(b, _), v) | (v, Expr::Builtin(b, _)) => Some((*b, v)),
                _ => None,
            },
            _ => None,
        };
        match task {
            Some((B::Comm, Expr::Str(s))) if f.comms.is_empty() && s.len() <= 15 => f.comms.push(s.clone()),
            Some((B::Pid, v)) if f.pids.is_empty() => f.pids.push(u32::try_from(constant(v, args).ok()?).ok()?),
            Some((B::Uid, v)) if f.uids.is_empty() => f.uids.push(u32::try_from(constant(v, args).ok()?).ok()?),
            Some(_) => return None,
            None => predicates(part, args, &mut f.predicates).ok()?,
        }
    }
    (f.predicates.len() <= PREDICATES_MAX).then_some(f)
}

fn conjuncts<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::Binary(Op::And, a, b, _) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        _ => out.push(e),
    }
}

/// `e`, a conjunction of field comparisons with constants, as kernel predicates.
fn predicates(e: &Expr, args: &[String], out: &mut Vec<Predicate>) -> Result<(), String> {
    match e {
        Expr::Binary(Op::And, a, b, _) => {
            predicates(a, args, out)?;
            predicates(b, args, out)
        }
        Expr::Binary(op, a, b, _) => {
            let (field, value, op) = match (&**a, &**b) {
                (Expr::Arg(f, _), v) => (f, constant(v, args)?, *op),
                (v, Expr::Arg(f, _)) => (f, constant(v, args)?, flip(*op)),
                _ => return Err("a predicate on something but a field".into()),
            };
            let op = match op {
                Op::Eq => CmpOp::Eq,
                Op::Ne => CmpOp::Ne,
                Op::Lt => CmpOp::Lt,
                Op::Le => CmpOp::Le,
                Op::Gt => CmpOp::Gt,
                Op::Ge => CmpOp::Ge,
                other => return Err(format!("`{other:?}` in a predicate")),
            };
            out.push(Predicate { field: field.clone(), op, value });
            Ok(())
        }
        _ => Err("a predicate that is not a comparison".into()),
    }
}

fn constant(e: &Expr, args: &[String]) -> Result<i64, String> {
    match e {
        Expr::Int(v) => Ok(*v),
        Expr::Unary(Op::Neg, inner) => constant(inner, args).map(i64::wrapping_neg),
        Expr::Pos(n) => args
            .get((*n as usize).wrapping_sub(1))
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("${n} is not a number")),
        _ => Err("a comparison with something but a constant".into()),
    }
}

fn flip(op: Op) -> Op {
    match op {
        Op::Lt => Op::Gt,
        Op::Le => Op::Ge,
        Op::Gt => Op::Lt,
        Op::Ge => Op::Le,
        other => other,
    }
}

fn fold_name(f: &Fold) -> &'static str {
    match f {
        Fold::Count => "count",
        Fold::Sum => "sum",
        Fold::Avg => "avg",
        Fold::Stats => "stats",
        Fold::Min => "min",
        Fold::Max => "max",
        Fold::Hist => "hist",
        Fold::Lhist(..) => "lhist",
    }
}
