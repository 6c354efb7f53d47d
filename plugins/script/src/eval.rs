//! The program run over events: values, maps, statements.

use std::collections::HashMap;

use wasmtap_sdk::{from_entries, Agg, AggId, AggKind, AggOrder, Aggregation, Event, Key, Stack};

use crate::parse::{Expr, Fold, Op, Slot, Stmt, B, F};

/// A value: bpftrace's integers (64-bit) and strings, stacks (`kstack`, `ustack`),
/// kept as addresses and named only when a map is reported, and pointers into the
/// traced process with the string the kernel read there when the probe fired.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Int(i64),
    Str(String),
    Stack(Stack),
    /// A pointer field or argument whose string its record carries (`str()` reads it):
    /// the address, and the string (empty if the kernel could not read it). As a number
    /// it is the address, so it can be stored, compared and passed on like one.
    Ptr(i64, String),
    /// `(a, b)`.
    Tuple(Vec<Value>),
}

impl Value {
    pub fn int(&self) -> i64 {
        match self {
            Value::Int(i) | Value::Ptr(i, _) => *i,
            Value::Str(s) => i64::from(!s.is_empty()),
            Value::Stack(s) => i64::from(!s.is_empty()),
            Value::Tuple(t) => i64::from(!t.is_empty()),
        }
    }

    fn sdk(&self) -> wasmtap_sdk::Value {
        match self {
            Value::Int(i) | Value::Ptr(i, _) => wasmtap_sdk::Value::Int(*i),
            Value::Str(s) => wasmtap_sdk::Value::Text(s.clone()),
            // Named when the map is reported ([`name_stacks`]).
            Value::Stack(s) => wasmtap_sdk::Value::Text(s.to_string()),
            Value::Tuple(_) => wasmtap_sdk::Value::Text(self.show()),
        }
    }

    /// As printf and plain maps show it; a stack as its addresses, outermost first.
    pub fn show(&self) -> String {
        match self {
            Value::Int(i) | Value::Ptr(i, _) => i.to_string(),
            Value::Str(s) => s.clone(),
            Value::Stack(s) => s.to_string(),
            Value::Tuple(t) => {
                let parts: Vec<String> = t.iter().map(Value::show).collect();
                format!("({})", parts.join(", "))
            }
        }
    }
}

/// A map's key: its parts (one, the common case, without a vector; one integer, the
/// commonest, without a `Value`). Made by [`MapKey::of`], so one key has one form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MapKey {
    Int(i64),
    One(Value),
    Many(Vec<Value>),
}

impl MapKey {
    /// The key of one value: a tuple's parts are the key's.
    pub fn of(v: Value) -> MapKey {
        match v {
            Value::Int(i) => MapKey::Int(i),
            Value::Tuple(parts) => MapKey::Many(parts),
            v => MapKey::One(v),
        }
    }

    pub fn parts(&self) -> std::borrow::Cow<'_, [Value]> {
        match self {
            MapKey::Int(i) => std::borrow::Cow::Owned(vec![Value::Int(*i)]),
            MapKey::One(v) => std::borrow::Cow::Borrowed(std::slice::from_ref(v)),
            MapKey::Many(v) => std::borrow::Cow::Borrowed(v),
        }
    }
}

impl Key for MapKey {
    fn to_values(&self) -> Vec<wasmtap_sdk::Value> {
        self.parts().iter().map(Value::sdk).collect()
    }
}

/// A map: an aggregation (`count()`, `hist()`…) computed here or in the kernel, or plain
/// values.
pub enum Map {
    Agg {
        agg: Agg<MapKey>,
        keys: usize,
    },
    Kernel {
        id: AggId,
        kind: AggKind,
        keys: usize,
    },
    Plain {
        values: wasmtap_sdk::FxHashMap<MapKey, Value>,
        keyed: bool,
    },
    /// `stats()`: per key, the count and the total.
    Stats {
        values: wasmtap_sdk::FxHashMap<MapKey, (i64, i64)>,
        keyed: bool,
    },
}

/// Names for a key of `n` parts (the host shows one part per name).
fn key_names(n: usize) -> &'static [&'static str] {
    const NAMES: [&str; 8] = ["key", "key2", "key3", "key4", "key5", "key6", "key7", "key8"];
    &NAMES[..n.min(NAMES.len())]
}

/// Where the interpreter is: the event, if any, and the probe that fired.
pub struct Ctx<'a, 'e> {
    pub ev: Option<&'a Event<'e>>,
    pub probe: &'a str,
    /// Monotonic ns now (for timers), else the event's.
    pub now: u64,
}

/// Whether the statements of a loop's body go on, or `break` or `continue` ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flow {
    #[default]
    On,
    Break,
    Continue,
}

/// A fault in the program at run time: the plugin reports it and goes on.
pub struct Fault(pub String);

#[derive(Default)]
pub struct Interp {
    pub maps: Vec<(String, Map)>,
    pub args: Vec<String>,
    pub started_ns: u64,
    pub vars: HashMap<String, Value>,
    pub printed: String,
    /// printf's arguments, reused from event to event.
    pub scratch: Vec<Value>,
    /// `exit()` ran: the run is ending; only END blocks run from now on.
    pub exited: bool,
    /// What `time()` shows: the local time's offset from UTC, in seconds, and the wall
    /// clock's offset from the events' monotonic clock, read once.
    pub utc_offset_s: i64,
    pub wall_offset_ns: Option<i64>,
    /// What `break` or `continue` asked of the loop being run.
    pub flow: Flow,
    /// `usym()`'s and `ksym()`'s names, by (pid, address) (pid 0: the kernel's), so that
    /// an address is named once; at most [`SYMBOLS_KEPT`], then forgotten together.
    pub symbols: HashMap<(u32, u64), String>,
}

/// Addresses [`Interp::symbols`] keeps named.
const SYMBOLS_KEPT: usize = 4096;

impl Interp {
    /// The map a statement names, found by name once per statement.
    fn map_mut(&mut self, name: &str, slot: &Slot) -> Option<&mut Map> {
        let i = match slot.get() {
            Some(i) => i,
            None => {
                let i = self.maps.iter().position(|(n, _)| n == name)?;
                slot.set(i);
                i
            }
        };
        self.maps.get_mut(i).map(|(_, m)| m)
    }

    pub fn run(&mut self, body: &[Stmt], cx: &Ctx<'_, '_>) -> Result<(), Fault> {
        for s in body {
            self.stmt(s, cx)?;
            if self.exited || self.flow != Flow::On {
                break;
            }
        }
        Ok(())
    }

    /// A loop's body once; whether the loop goes on.
    fn iterate(&mut self, body: &[Stmt], cx: &Ctx<'_, '_>) -> Result<bool, Fault> {
        self.run(body, cx)?;
        let on = self.flow != Flow::Break && !self.exited;
        self.flow = Flow::On;
        Ok(on)
    }

    /// A statement: an aggregation here, the rest in [`Interp::other`] (a small hot
    /// function, the per-event path of `@[k] = count()`).
    #[inline]
    fn stmt(&mut self, s: &Stmt, cx: &Ctx<'_, '_>) -> Result<(), Fault> {
        match s {
            Stmt::Aggregate { map, slot, keys, value, .. } => {
                let key = self.key(keys, cx)?;
                let v = match value {
                    Some(e) => self.int(e, cx)?,
                    None => 0,
                };
                match self.map_mut(map, slot) {
                    Some(Map::Agg { agg, .. }) => agg.add(key, v),
                    Some(Map::Stats { values, .. }) => {
                        let (n, total) = values.entry(key).or_insert((0, 0));
                        *n += 1;
                        *total = total.wrapping_add(v);
                    }
                    _ => {}
                }
                Ok(())
            }
            _ => self.other(s, cx),
        }
    }

    #[inline(never)]
    fn other(&mut self, s: &Stmt, cx: &Ctx<'_, '_>) -> Result<(), Fault> {
        match s {
            Stmt::Aggregate { .. } => return self.stmt(s, cx),
            Stmt::Store { map, slot, keys, op, value, .. } => {
                let key = self.key(keys, cx)?;
                let v = self.eval(value, cx)?;
                if let Some(Map::Plain { values, .. }) = self.map_mut(map, slot) {
                    let new = match op {
                        None => v,
                        Some(op) => {
                            let old = values.get(&key).map_or(0, Value::int);
                            Value::Int(binary(*op, old, v.int()))
                        }
                    };
                    values.insert(key, new);
                }
            }
            Stmt::Let { var, value } => {
                let v = self.eval(value, cx)?;
                self.vars.insert(var.clone(), v);
            }
            Stmt::Printf { fmt, args, .. } => {
                let mut vals = std::mem::take(&mut self.scratch);
                vals.clear();
                for a in args {
                    vals.push(self.eval(a, cx)?);
                }
                crate::printf::format(fmt, &vals, &mut self.printed);
                self.scratch = vals;
            }
            Stmt::Print { map, top, .. } => {
                let text = self.map_text(map, *top);
                self.printed.push_str(&text);
            }
            Stmt::Time(fmt) => {
                let mut out = std::mem::take(&mut self.printed);
                self.strftime(fmt, cx.now as i64, &mut out);
                self.printed = out;
            }
            // bpftrace's clear() deletes every key; zero() keeps them at zero.
            Stmt::Clear { map, slot, .. } => match self.map_mut(map, slot) {
                Some(Map::Stats { values, .. }) => values.clear(),
                Some(Map::Agg { agg, .. }) => agg.trunc(0),
                Some(Map::Plain { values, .. }) => values.clear(),
                Some(Map::Kernel { .. }) | None => {}
            },
            Stmt::Zero { map, slot, .. } => match self.map_mut(map, slot) {
                Some(Map::Stats { values, .. }) => values.values_mut().for_each(|v| *v = (0, 0)),
                Some(Map::Agg { agg, .. }) => agg.clear(),
                Some(Map::Plain { values, .. }) => values.values_mut().for_each(|v| *v = Value::Int(0)),
                Some(Map::Kernel { .. }) | None => {}
            },
            Stmt::Delete { map, slot, keys, .. } => {
                let key = self.key(keys, cx)?;
                match self.map_mut(map, slot) {
                    Some(Map::Agg { agg, .. }) => {
                        agg.remove(&key);
                    }
                    Some(Map::Plain { values, .. }) => {
                        values.remove(&key);
                    }
                    Some(Map::Stats { values, .. }) => {
                        values.remove(&key);
                    }
                    Some(Map::Kernel { .. }) | None => {}
                }
            }
            Stmt::If { cond, then, otherwise } => {
                if self.int(cond, cx)? != 0 {
                    self.run(then, cx)?;
                } else {
                    self.run(otherwise, cx)?;
                }
            }
            // Loops run as long as they do: the plugin's deadline bounds each call.
            Stmt::While { cond, body } => while self.int(cond, cx)? != 0 && self.iterate(body, cx)? {},
            Stmt::Unroll { times, body } => {
                for _ in 0..*times {
                    if !self.iterate(body, cx)? {
                        break;
                    }
                }
            }
            Stmt::For { var, from, to, body } => {
                let (from, to) = (self.eval(from, cx)?.int(), self.eval(to, cx)?.int());
                for i in from..to {
                    self.vars.insert(var.clone(), Value::Int(i));
                    if !self.iterate(body, cx)? {
                        break;
                    }
                }
            }
            Stmt::Break => self.flow = Flow::Break,
            Stmt::Continue => self.flow = Flow::Continue,
            Stmt::Expr(e) => {
                self.eval(e, cx)?;
            }
            Stmt::Exit => {
                if !self.exited {
                    wasmtap_sdk::exit();
                }
                self.exited = true;
            }
        }
        Ok(())
    }

    fn key(&mut self, keys: &[Expr], cx: &Ctx<'_, '_>) -> Result<MapKey, Fault> {
        match keys {
            // A tuple's parts are the key's: `@m[$key]` of `$key = (a, b)` is `@m[a, b]`.
            [one] if is_int(one) => Ok(MapKey::Int(self.int(one, cx)?)),
            [one] => Ok(MapKey::of(self.eval(one, cx)?)),
            _ => keys.iter().map(|k| self.eval(k, cx)).collect::<Result<Vec<_>, _>>().map(MapKey::Many),
        }
    }

    #[inline(never)]
    pub fn eval(&mut self, e: &Expr, cx: &Ctx<'_, '_>) -> Result<Value, Fault> {
        Ok(match e {
            Expr::Int(v) => Value::Int(*v),
            Expr::Str(s) => Value::Str(s.clone()),
            Expr::Pos(n) => {
                let arg = self.args.get((*n as usize).wrapping_sub(1)).cloned().unwrap_or_default();
                match arg.parse::<i64>() {
                    Ok(v) => Value::Int(v),
                    Err(_) if arg.is_empty() => Value::Int(0),
                    Err(_) => Value::Str(arg),
                }
            }
            Expr::PosCount => Value::Int(self.args.len() as i64),
            Expr::Var(v, _) => self.vars.get(v).cloned().unwrap_or(Value::Int(0)),
            Expr::Builtin(b, _) => builtin(*b, cx, self.started_ns),
            Expr::Arg(field, _) => arg(field, cx)?,
            Expr::Map { map, slot, keys, .. } => {
                let key = self.key(keys, cx)?;
                match self.map_mut(map, slot).map(|m| &*m) {
                    Some(Map::Agg { agg, .. }) => Value::Int(agg.value(&key).unwrap_or(0)),
                    Some(Map::Plain { values, .. }) => values.get(&key).cloned().unwrap_or(Value::Int(0)),
                    // bpftrace reads a stats map as its average.
                    Some(Map::Stats { values, .. }) => {
                        Value::Int(values.get(&key).map_or(0, |(n, t)| t.checked_div(*n).unwrap_or(0)))
                    }
                    Some(Map::Kernel { .. }) | None => Value::Int(0),
                }
            }
            // Integers computed without a `Value` per operand; `==` and `!=` of two
            // strings compare the strings.
            Expr::Binary(op @ (Op::Eq | Op::Ne), a, b, _) if !is_int(a) && !is_int(b) => {
                let (l, r) = (self.eval(a, cx)?, self.eval(b, cx)?);
                Value::Int(compare(*op, &l, &r))
            }
            Expr::Unary(..) | Expr::Binary(..) => Value::Int(self.int(e, cx)?),
            Expr::Ternary(c, a, b) => {
                if self.int(c, cx)? != 0 {
                    self.eval(a, cx)?
                } else {
                    self.eval(b, cx)?
                }
            }
            Expr::Str1(inner, len) => {
                let mut s = match self.eval(inner, cx)? {
                    Value::Ptr(_, s) => s,
                    // A number as text: `str($1)` of a numeric parameter.
                    Value::Int(i) => i.to_string(),
                    Value::Str(s) => s,
                    v @ (Value::Stack(_) | Value::Tuple(_)) => v.show(),
                };
                if let Some(len) = len {
                    // bpftrace's length counts the NUL.
                    let keep = usize::try_from(self.eval(len, cx)?.int().saturating_sub(1)).unwrap_or(0);
                    if let Some((at, _)) = s.char_indices().nth(keep) {
                        s.truncate(at);
                    }
                }
                Value::Str(s)
            }
            Expr::Call(F::Tuple, parts, _) => {
                Value::Tuple(parts.iter().map(|p| self.eval(p, cx)).collect::<Result<_, _>>()?)
            }
            Expr::Call(F::Strftime, args, _) => {
                let Expr::Str(fmt) = &args[0] else { return Ok(Value::Str(String::new())) };
                let ns = self.eval(&args[1], cx)?.int();
                let mut out = String::new();
                self.strftime(fmt, ns, &mut out);
                Value::Str(out)
            }
            Expr::Call(f @ (F::Usym | F::Ksym), args, _) => {
                let addr = self.eval(&args[0], cx)?.int() as u64;
                let pid = if *f == F::Ksym { 0 } else { cx.ev.map_or(0, |e| e.pid()) };
                Value::Str(self.symbol(pid, addr, *f == F::Ksym))
            }
        })
    }

    /// `e` as an integer, as `eval(e).int()` would give it: without a `Value` where `e`
    /// computes one (the per-event path of predicates, keys and aggregated values).
    pub fn int(&mut self, e: &Expr, cx: &Ctx<'_, '_>) -> Result<i64, Fault> {
        Ok(match e {
            Expr::Int(v) => *v,
            Expr::Builtin(b, _) if int_builtin(*b) => builtin_int(*b, cx, self.started_ns),
            Expr::Unary(op, inner) => {
                let v = self.int(inner, cx)?;
                match op {
                    Op::Not => i64::from(v == 0),
                    Op::Neg => v.wrapping_neg(),
                    _ => !v,
                }
            }
            Expr::Binary(op @ (Op::And | Op::Or), a, b, _) => {
                let l = self.int(a, cx)? != 0;
                let short = if *op == Op::And { !l } else { l };
                if short {
                    i64::from(l)
                } else {
                    i64::from(self.int(b, cx)? != 0)
                }
            }
            Expr::Binary(op @ (Op::Eq | Op::Ne), a, b, _) if !is_int(a) && !is_int(b) => {
                let (l, r) = (self.eval(a, cx)?, self.eval(b, cx)?);
                compare(*op, &l, &r)
            }
            Expr::Binary(op, a, b, _) => {
                let l = self.int(a, cx)?;
                binary(*op, l, self.int(b, cx)?)
            }
            _ => self.eval(e, cx)?.int(),
        })
    }

    /// Monotonic timestamp `ns` as the wall clock's local time, formatted by `fmt`.
    pub fn strftime(&mut self, fmt: &str, ns: i64, out: &mut String) {
        let offset = *self
            .wall_offset_ns
            .get_or_insert_with(|| wasmtap_sdk::wall_ns() as i64 - wasmtap_sdk::monotonic_ns() as i64);
        let wall = ns.wrapping_add(offset);
        let secs = wall.div_euclid(1_000_000_000) + self.utc_offset_s;
        crate::printf::strftime(fmt, secs, wall.rem_euclid(1_000_000_000) as u32, out);
    }

    /// The function `addr` is in (of process `pid`, or of the kernel), as bpftrace's
    /// `usym()` and `ksym()` print it: its name, or the address in hex when unknown.
    fn symbol(&mut self, pid: u32, addr: u64, kernel: bool) -> String {
        let key = (if kernel { 0 } else { pid }, addr);
        if let Some(name) = self.symbols.get(&key) {
            return name.clone();
        }
        let stack = if kernel { Stack::new(0, &[addr], &[]) } else { Stack::new(pid, &[], &[addr]) };
        let named = wasmtap_sdk::symbolize(&[stack]);
        let symbol = named.first().and_then(|f| f.first()).map(|f| f.symbol.clone()).unwrap_or_default();
        // An address the host cannot name is kept as its hex too: asked once, not per event.
        let name = if symbol.is_empty() { format!("{addr:#x}") } else { symbol };
        if self.symbols.len() >= SYMBOLS_KEPT {
            self.symbols.clear();
        }
        self.symbols.insert(key, name.clone());
        name
    }

    /// The maps bpftrace prints at the end: every non-empty one, in order of first use.
    pub fn reports(&self) -> (Vec<Aggregation>, String) {
        let (mut aggs, mut text) = (Vec::new(), String::new());
        for (name, map) in &self.maps {
            match map {
                Map::Agg { agg, keys } if !agg.is_empty() => {
                    // A tuple key (`@m[$key]`) has more parts than the map's brackets.
                    let parts = agg.iter().next().map_or(*keys, |(k, _)| k.parts().len().max(*keys));
                    let mut a = agg.to_aggregation(name, "", key_names(parts), AggOrder::ValueAscending, 0);
                    name_stacks(agg, &mut a);
                    aggs.push(a);
                }
                Map::Kernel { id, kind, keys } => {
                    let entries = id.read(false);
                    if !entries.is_empty() {
                        let order = AggOrder::ValueAscending;
                        aggs.push(from_entries(name, "", key_names(*keys), *kind, order, 0, entries));
                    }
                }
                Map::Plain { values, .. } if !values.is_empty() => text.push_str(&self.map_text(name, None)),
                Map::Stats { values, .. } if !values.is_empty() => text.push_str(&self.map_text(name, None)),
                _ => {}
            }
        }
        (aggs, text)
    }

    /// A map as bpftrace prints it: `@name[key]: value`, by value (stats by average), then
    /// key; with `top`, only the `top` largest.
    fn map_text(&self, name: &str, top: Option<usize>) -> String {
        let Some((_, map)) = self.maps.iter().find(|(n, _)| n == name) else { return String::new() };
        // (key, what sorts it, what is printed after the colon)
        let (keyed, mut rows): (bool, Vec<(&MapKey, Value, String)>) = match map {
            Map::Plain { values, keyed } => (*keyed, values.iter().map(|(k, v)| (k, v.clone(), v.show())).collect()),
            Map::Stats { values, keyed } => {
                let rows = values.iter().map(|(k, (n, t))| {
                    let avg = t.checked_div(*n).unwrap_or(0);
                    (k, Value::Int(avg), format!("count {n}, average {avg}, total {t}"))
                });
                (*keyed, rows.collect())
            }
            Map::Agg { agg, keys } => {
                (*keys > 0, agg.iter().map(|(k, v)| (k, Value::Int(scalar(&v)), scalar(&v).to_string())).collect())
            }
            Map::Kernel { .. } => return String::new(),
        };
        rows.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        if let Some(top) = top {
            rows.drain(..rows.len().saturating_sub(top));
        }
        let mut out = String::new();
        for (k, _, shown) in rows {
            match keyed {
                true => {
                    let parts: Vec<String> = k.parts().iter().map(Value::show).collect();
                    out.push_str(&format!("@{name}[{}]: {shown}\n", parts.join(", ")));
                }
                false => out.push_str(&format!("@{name}: {shown}\n")),
            }
        }
        out.push('\n');
        out
    }
}

/// The stacks among `agg`'s keys, named in as few host calls as the address cap
/// allows, put in place of their addresses in the report `a` (where the host renders
/// them as bpftrace does: one `function+offset` per line).
fn name_stacks(agg: &Agg<MapKey>, a: &mut Aggregation) {
    let mut stacks: Vec<Stack> = Vec::new();
    for (key, _) in agg.iter() {
        stacks.extend(key.parts().iter().filter_map(|v| match v {
            Value::Stack(s) => Some(s.clone()),
            _ => None,
        }));
    }
    if stacks.is_empty() {
        return;
    }
    stacks.sort();
    stacks.dedup();
    let named: HashMap<String, Vec<wasmtap_sdk::Frame>> =
        stacks.iter().map(Stack::to_string).zip(wasmtap_sdk::symbolize(&stacks)).collect();
    for entry in &mut a.entries {
        for part in &mut entry.key {
            if let wasmtap_sdk::Value::Text(t) = part {
                if let Some(frames) = named.get(t.as_str()) {
                    *part = wasmtap_sdk::Value::Stack(frames.clone());
                }
            }
        }
    }
}

fn scalar(v: &wasmtap_sdk::AggValue) -> i64 {
    match v {
        wasmtap_sdk::AggValue::Scalar(s) => *s,
        wasmtap_sdk::AggValue::Histogram(h) => h.buckets.iter().map(|b| b.count as i64).sum(),
        wasmtap_sdk::AggValue::Quantiles(q) => q.count as i64,
    }
}

/// A new map for `fold`.
pub fn new_agg(fold: &Fold) -> Agg<MapKey> {
    match fold {
        Fold::Count => Agg::count(),
        Fold::Sum => Agg::sum(),
        Fold::Avg | Fold::Stats => Agg::avg(),
        Fold::Min => Agg::min(),
        Fold::Max => Agg::max(),
        Fold::Hist => Agg::quantize(),
        Fold::Lhist(min, max, step) => Agg::lquantize(*min, *max, *step).unwrap_or_else(|_| Agg::quantize()),
    }
}

/// Integer operators as bpftrace computes them (64-bit, wrapping; division by zero is 0).
#[inline]
fn binary(op: Op, a: i64, b: i64) -> i64 {
    match op {
        Op::Add => a.wrapping_add(b),
        Op::Sub => a.wrapping_sub(b),
        Op::Mul => a.wrapping_mul(b),
        Op::Div => a.checked_div(b).unwrap_or(0),
        Op::Rem => a.checked_rem(b).unwrap_or(0),
        Op::BitAnd => a & b,
        Op::BitOr => a | b,
        Op::Xor => a ^ b,
        Op::Shl => a.wrapping_shl(b as u32),
        Op::Shr => a.wrapping_shr(b as u32),
        Op::Eq => i64::from(a == b),
        Op::Ne => i64::from(a != b),
        Op::Lt => i64::from(a < b),
        Op::Le => i64::from(a <= b),
        Op::Gt => i64::from(a > b),
        Op::Ge => i64::from(a >= b),
        Op::And => i64::from(a != 0 && b != 0),
        Op::Or => i64::from(a != 0 || b != 0),
        Op::Not | Op::Neg | Op::BitNot => 0,
    }
}

/// Whether `e` always computes an integer: `int` needs no `Value` for it.
fn is_int(e: &Expr) -> bool {
    match e {
        Expr::Int(_) | Expr::PosCount | Expr::Unary(..) | Expr::Binary(..) => true,
        Expr::Builtin(b, _) => int_builtin(*b) && !matches!(b, B::Retval | B::Arg(_)),
        _ => false,
    }
}

/// Whether builtin `b` is a number (a uprobe's argument or return value is one, though
/// it may carry the string it points to).
fn int_builtin(b: B) -> bool {
    !matches!(b, B::Comm | B::Probe | B::Kstack | B::Ustack)
}

/// `==` or `!=` of two values: strings by their text, anything else as numbers.
fn compare(op: Op, l: &Value, r: &Value) -> i64 {
    match (l, r) {
        (Value::Str(x), Value::Str(y)) => i64::from((x == y) == (op == Op::Eq)),
        _ => binary(op, l.int(), r.int()),
    }
}

/// A numeric builtin's value ([`int_builtin`]), as [`builtin`]'s `.int()` gives it.
fn builtin_int(b: B, cx: &Ctx<'_, '_>, started: u64) -> i64 {
    let ev = cx.ev;
    match b {
        B::Pid => ev.map_or(0, |e| i64::from(e.pid())),
        B::Tid => ev.map_or(0, |e| i64::from(e.tid())),
        B::Uid => ev.map_or(0, |e| i64::from(e.uid())),
        B::Gid => ev.map_or(0, |e| i64::from(e.gid())),
        B::Cgroup => ev.map_or(0, |e| e.cgroup_id() as i64),
        B::Nsecs => cx.now as i64,
        B::Elapsed => cx.now.saturating_sub(started) as i64,
        B::Retval => match ev {
            Some(Event::Tracepoint(tp)) => tp.i64("ret").unwrap_or(0),
            Some(Event::SysExit(x)) => x.ret(),
            Some(Event::User(u)) => u.retval().unwrap_or(0) as i64,
            _ => 0,
        },
        B::Cpu => match ev {
            Some(Event::Sample(s)) => i64::from(s.cpu()),
            _ => 0,
        },
        B::Arg(i) => match ev {
            Some(Event::User(u)) if !u.is_return() => u.arg(i.into()) as i64,
            _ => 0,
        },
        B::Comm | B::Probe | B::Kstack | B::Ustack => builtin(b, cx, started).int(),
    }
}

fn builtin(b: B, cx: &Ctx<'_, '_>, started: u64) -> Value {
    let ev = cx.ev;
    match b {
        B::Pid => Value::Int(ev.map_or(0, |e| i64::from(e.pid()))),
        B::Tid => Value::Int(ev.map_or(0, |e| i64::from(e.tid()))),
        B::Uid => Value::Int(ev.map_or(0, |e| i64::from(e.uid()))),
        B::Gid => Value::Int(ev.map_or(0, |e| i64::from(e.gid()))),
        B::Cgroup => Value::Int(ev.map_or(0, |e| e.cgroup_id() as i64)),
        B::Comm => Value::Str(ev.map_or_else(String::new, |e| e.comm().into_owned())),
        B::Nsecs => Value::Int(cx.now as i64),
        B::Elapsed => Value::Int(cx.now.saturating_sub(started) as i64),
        B::Probe => Value::Str(cx.probe.to_string()),
        // The event's stacks, if its probe asked for them (a block that uses them does).
        B::Kstack => Value::Stack(
            ev.and_then(|e| e.stack()).map_or_else(|| Stack::new(0, &[], &[]), |s| Stack::new(0, s.kernel(), &[])),
        ),
        B::Ustack => Value::Stack(
            ev.and_then(|e| e.stack()).map_or_else(|| Stack::new(0, &[], &[]), |s| Stack::new(s.pid(), &[], s.user())),
        ),
        // A tracepoint's `ret` field (the syscalls' exits), a uretprobe's return value.
        B::Retval => match ev {
            Some(Event::Tracepoint(tp)) => Value::Int(tp.i64("ret").unwrap_or(0)),
            Some(Event::SysExit(x)) => Value::Int(x.ret()),
            Some(Event::User(u)) => user_value(u, 0, u.retval().unwrap_or(0)),
            _ => Value::Int(0),
        },
        B::Cpu => match ev {
            Some(Event::Sample(s)) => Value::Int(i64::from(s.cpu())),
            _ => Value::Int(0),
        },
        B::Arg(i) => match ev {
            Some(Event::User(u)) if !u.is_return() => user_value(u, i.into(), u.arg(i.into())),
            _ => Value::Int(0),
        },
    }
}

/// A user probe's value `v` (argument `i`; a return value is 0), with the string it
/// points to if the record carries one.
fn user_value(u: &wasmtap_sdk::UserProbe<'_>, i: usize, v: u64) -> Value {
    match u.user_string(i) {
        Some(s) => Value::Ptr(v as i64, String::from_utf8_lossy(s.unwrap_or_default()).into_owned()),
        None => Value::Int(v as i64),
    }
}

fn arg(field: &str, cx: &Ctx<'_, '_>) -> Result<Value, Fault> {
    // `tracepoint:raw_syscalls:sys_enter` and `sys_exit` come as the syscall records.
    match (cx.ev, field) {
        (Some(Event::SysEnter(e)), "id") => return Ok(Value::Int(e.id())),
        (Some(Event::SysExit(e)), "id") => return Ok(Value::Int(e.id())),
        (Some(Event::SysExit(e)), "ret") => return Ok(Value::Int(e.ret())),
        (Some(Event::SysEnter(_) | Event::SysExit(_)), _) => {
            return Err(Fault(format!("{} has no field `{field}` here (it has: id, ret at exits)", cx.probe)))
        }
        _ => {}
    }
    let Some(Event::Tracepoint(tp)) = cx.ev else {
        return Err(Fault(format!("args.{field}: {} has no args", cx.probe)));
    };
    use wasmtap_sdk::FieldValue;
    match tp.field(field) {
        Some(v) => Ok(match v.as_i64() {
            Some(i) => match tp.user_string(field) {
                Some(s) => Value::Ptr(i, String::from_utf8_lossy(s.unwrap_or_default()).into_owned()),
                None => Value::Int(i),
            },
            None => match v {
                FieldValue::Text(t) => Value::Str(t.into_owned()),
                _ => Value::Int(0),
            },
        }),
        None => Err(Fault(format!("{} has no field `{field}`", cx.probe))),
    }
}
