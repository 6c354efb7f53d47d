//! script: bpftrace's language, interpreted inside the sandbox.
//!
//! `wasmtap -e 'PROGRAM'` and `wasmtap script FILE.bt` run this plugin with the program
//! as its `program` parameter. The program is parsed when the plugin starts (an error
//! names the line and column, with a caret under it), its probes become the plan's
//! subscriptions, and each event runs the blocks of its probe. Maps are printed at the
//! end as bpftrace prints them; aggregations (`count()`, `hist()`…) go through the host,
//! so every output format has them. See README.md for the language supported.

pub mod eval;
pub mod lex;
pub mod parse;
pub mod printf;
pub mod push;

use std::collections::{HashMap, HashSet};

use wasmtap_sdk::{
    export_plugin, Aggregation, Event, Level, Output, ParamKind, ParamSpec, Params, Plan, Plugin, PluginInfo,
    StackMode, Subscription,
};

use eval::{Ctx, Interp, Map};
use lex::SyntaxError;
use parse::{Block, Stmt};

/// Separates the positional parameters in the `args` parameter.
pub const ARG_SEP: char = '\u{1f}';
/// Distinct run-time fault messages logged.
const FAULTS_LOGGED: usize = 16;

#[derive(Default)]
pub struct Script {
    blocks: Vec<Block>,
    /// The blocks each subscription runs, in program order.
    by_sub: Vec<Vec<usize>>,
    /// Each subscription's probe as written.
    probe_of: Vec<String>,
    interp: Interp,
    faults: HashSet<String>,
    /// The last text printed ended without a newline.
    line_open: bool,
    /// The maps are printed at the end (`config = { print_maps_on_exit = false }` says not).
    exit_maps: bool,
}

impl Plugin for Script {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "script",
            env!("CARGO_PKG_VERSION"),
            "bpftrace's language, interpreted in the sandbox: wasmtap -e 'PROGRAM'",
            vec![
                ParamSpec::new("program", ParamKind::Text, "", "the program, in bpftrace's language"),
                ParamSpec::new("args", ParamKind::Text, "", "the positional parameters $1, $2… (separated by U+001F)"),
                ParamSpec::new(
                    "utc_offset",
                    ParamKind::Integer,
                    "0",
                    "seconds east of UTC of the local time time() shows (the CLI passes this machine's)",
                ),
                ParamSpec::new(
                    "explain",
                    ParamKind::Boolean,
                    "false",
                    "log where each block runs: in the kernel or here",
                ),
            ],
        )
    }

    fn start(params: &Params) -> Result<(Self, Plan), String> {
        let src = params.text("program");
        let args = params.text("args");
        let args: Vec<String> =
            if args.is_empty() { Vec::new() } else { args.split(ARG_SEP).map(String::from).collect() };
        if src.trim().is_empty() {
            // What `plugin pack` plans with: nothing. A run needs a program.
            wasmtap_sdk::log(Level::Warn, "no program: wasmtap -e 'PROGRAM' or wasmtap script FILE.bt");
            return Ok((Script::default(), Plan::new(Vec::new())));
        }
        let (mut script, plan) = Script::planned(src, args, params.bool("explain")).map_err(|e| located(src, &e))?;
        script.interp.utc_offset_s = params.int("utc_offset");
        Ok((script, plan))
    }

    fn on_event(&mut self, ev: &Event<'_>, out: &mut Output) {
        if self.interp.exited {
            return;
        }
        let sub = usize::from(ev.sub());
        let Some(blocks) = self.by_sub.get(sub) else { return };
        let cx = Ctx { ev: Some(ev), probe: &self.probe_of[sub], now: ev.ts_ns() };
        for &b in blocks {
            if let Err(f) = run_block(&mut self.interp, &self.blocks[b], &cx) {
                note(&mut self.faults, f.0);
            }
        }
        self.flush(out);
    }

    fn on_tick(&mut self, sub: u32, now_ns: u64, out: &mut Output) -> Vec<Aggregation> {
        let sub = sub as usize;
        let Some(blocks) = self.by_sub.get(sub) else { return Vec::new() };
        if self.probe_of[sub] == "BEGIN" {
            self.interp.started_ns = now_ns;
        }
        if self.interp.exited && self.probe_of[sub] != "END" {
            return Vec::new();
        }
        let cx = Ctx { ev: None, probe: &self.probe_of[sub], now: now_ns };
        for &b in blocks {
            if let Err(f) = run_block(&mut self.interp, &self.blocks[b], &cx) {
                note(&mut self.faults, f.0);
            }
        }
        self.flush(out);
        Vec::new()
    }

    fn finish(&mut self, out: &mut Output) -> Vec<Aggregation> {
        self.flush(out);
        if !self.exit_maps {
            return Vec::new();
        }
        let (aggs, text) = self.interp.reports();
        // The maps start on a line of their own, after a printf that ended without one
        // (bitesize's "…by process name:").
        if self.line_open && (!aggs.is_empty() || !text.is_empty()) {
            out.print("\n");
        }
        out.print(&text);
        aggs
    }
}

impl Script {
    /// Print what the program printed, noting whether it left its last line open.
    fn flush(&mut self, out: &mut Output) {
        let printed = &mut self.interp.printed;
        if !printed.is_empty() {
            out.print(printed);
            self.line_open = !printed.ends_with('\n');
            printed.clear();
        }
    }

    /// The program `src` with positional parameters `args`, and the plan it asks for.
    pub fn new(src: &str, args: Vec<String>) -> Result<(Script, Plan), SyntaxError> {
        Script::planned(src, args, false)
    }

    /// The program and its plan; with `explain`, where each block runs is logged.
    pub fn planned(src: &str, args: Vec<String>, explain: bool) -> Result<(Script, Plan), SyntaxError> {
        let program = parse::parse(src)?;
        let missing = program.config.missing_probes;
        // Every probe checked first, so that an error names the first bad one.
        let mut probes: Vec<Vec<(String, Subscription)>> = Vec::new();
        for block in &program.blocks {
            let mut subs = Vec::new();
            for (p, at) in &block.probes {
                match subscriptions(p) {
                    Ok(found) => subs.extend(found),
                    // `missing_probes = "ignore"`: a wildcard matching nothing is no probe.
                    Err(msg) if missing != parse::Missing::Error && p.contains('*') && msg.starts_with("no ") => {
                        skipped(missing, p, &msg)
                    }
                    Err(msg) => return Err(SyntaxError { at: *at, msg }),
                }
            }
            // And a probe that cannot attach (a library or function this system lacks),
            // as the host says, is left out.
            if missing != parse::Missing::Error {
                subs.retain(|(name, _)| {
                    let user = ["uprobe:", "uretprobe:", "usdt:"].iter().any(|c| name.starts_with(c));
                    match (user || name.starts_with("tracepoint:")).then(|| wasmtap_sdk::describe(name)) {
                        Some(Err(why)) => {
                            skipped(missing, name, &why);
                            false
                        }
                        _ => true,
                    }
                });
            }
            probes.push(subs);
        }
        // Each tracepoint's layout, where the host can say: a field the program names
        // and the tracepoint lacks is refused here, and text is not counted in the kernel.
        let mut layouts: HashMap<String, wasmtap_sdk::ProbeSchema> = HashMap::new();
        for (name, _) in probes.iter().flatten() {
            if name.starts_with("tracepoint:") && !layouts.contains_key(name) {
                if let Ok(schema) = wasmtap_sdk::describe(name) {
                    layouts.insert(name.clone(), schema);
                }
            }
        }
        for (block, block_probes) in program.blocks.iter().zip(&probes) {
            check_fields(block, block_probes, &layouts)?;
        }
        let text = |probe: &str, field: &str| {
            layouts
                .get(probe)
                .and_then(|s| s.fields.iter().find(|f| f.name == field))
                .is_some_and(|f| !matches!(f.kind, wasmtap_sdk::FieldType::Signed | wasmtap_sdk::FieldType::Unsigned))
        };
        // What runs in the kernel.
        let uses = push::uses(&program.blocks);
        let mut pushed: Vec<push::Pushed> = Vec::new();
        let mut in_kernel = vec![false; program.blocks.len()];
        // A block pushed into the kernel has one probe; a wildcard's block streams.
        let first: Vec<String> =
            probes.iter().map(|p| if p.len() == 1 { p[0].0.clone() } else { format!("{} probes", p.len()) }).collect();
        for (a, b, maps) in push::latencies(&program.blocks, &first, &uses, &args, &text) {
            if in_kernel[a] || in_kernel[b] || !push::fits(pushed.len(), maps.len()) {
                continue;
            }
            let names: Vec<String> = maps.iter().map(|p| format!("@{}", p.map)).collect();
            pushed.extend(maps);
            (in_kernel[a], in_kernel[b]) = (true, true);
            if explain {
                let said =
                    format!("in the kernel: the latency from {} to {}: {}", first[a], first[b], names.join(", "));
                wasmtap_sdk::log(Level::Info, &format!("blocks {} and {}: {said}", a + 1, b + 1));
            }
        }
        for (i, block) in program.blocks.iter().enumerate() {
            if in_kernel[i] {
                continue;
            }
            let probe = &first[i];
            let said = match push::block(block, probe, &uses, &args, &text) {
                Ok(p) if push::fits(pushed.len(), p.len()) => {
                    let maps: Vec<String> = p.iter().map(|p| format!("@{}", p.map)).collect();
                    pushed.extend(p);
                    in_kernel[i] = true;
                    format!("in the kernel: {probe}: {}", maps.join(", "))
                }
                Ok(_) => format!("streamed: {probe}: more kernel aggregations than a plugin may declare"),
                Err(why) => format!("streamed: {probe}: {why}"),
            };
            if explain {
                wasmtap_sdk::log(Level::Info, &format!("block {}: {said}", i + 1));
            }
        }
        // `cpu` is recorded with samples only.
        for (block, block_probes) in program.blocks.iter().zip(&probes) {
            let mut cpu_at = None;
            each_expr(block, &mut |e| {
                if let parse::Expr::Builtin(parse::B::Cpu, at) = e {
                    cpu_at.get_or_insert(*at);
                }
            });
            let other = block_probes.iter().find(|(p, _)| !p.starts_with("profile:") && !p.starts_with("software:"));
            if let (Some(at), Some((probe, _))) = (cpu_at, other) {
                return Err(SyntaxError {
                    at,
                    msg: format!("cpu is recorded with profile and software events only, not with `{probe}`"),
                });
            }
        }
        let mut subs: Vec<Subscription> = Vec::new();
        let mut probe_of: Vec<String> = Vec::new();
        let mut by_sub: Vec<Vec<usize>> = Vec::new();
        for (i, block_probes) in probes.into_iter().enumerate() {
            if in_kernel[i] {
                continue;
            }
            let stacks = stacks_of(&program.blocks[i]);
            for (canonical, sub) in block_probes {
                let idx = match probe_of.iter().position(|p| *p == canonical) {
                    Some(idx) => {
                        subs[idx].stacks = subs[idx].stacks | stacks;
                        idx
                    }
                    None => {
                        subs.push(sub.stacks(stacks));
                        probe_of.push(canonical);
                        by_sub.push(Vec::new());
                        probe_of.len() - 1
                    }
                };
                if !by_sub[idx].contains(&i) {
                    by_sub[idx].push(i);
                }
            }
        }
        // The strings its blocks read (`str(args.filename)`) are read in the kernel as
        // the probe fires: records carry them.
        let wanted = strings_of(&program.blocks);
        for (sub, blocks) in subs.iter().zip(&by_sub) {
            let tracepoint = sub.probe.starts_with("tracepoint:");
            // A return probe has only its return value; an entry or USDT probe its arguments.
            let ret = sub.probe.starts_with("uretprobe:");
            let args = sub.probe.starts_with("uprobe:") || sub.probe.starts_with("usdt:");
            let mut fields: Vec<&str> = Vec::new();
            let mut first_at = 0;
            for want in blocks.iter().flat_map(|&b| &wanted[b]) {
                let (name, at) = match want {
                    Want::Field(f, at) if tracepoint => (f.as_str(), *at),
                    Want::UserArg(a, at) if (a == "retval" && ret) || (a != "retval" && args) => (a.as_str(), *at),
                    _ => continue,
                };
                if !fields.contains(&name) {
                    if fields.is_empty() {
                        first_at = at;
                    }
                    fields.push(name);
                }
            }
            if fields.len() > wasmtap_sdk::abi::strings::MAX {
                return Err(SyntaxError {
                    at: first_at,
                    msg: format!(
                        "str() of {} pointers of `{}`: at most {} a probe are read in the kernel",
                        fields.len(),
                        sub.probe,
                        wasmtap_sdk::abi::strings::MAX
                    ),
                });
            }
            if !fields.is_empty() {
                wasmtap_sdk::user_strings(&sub.probe, &fields).map_err(|msg| SyntaxError { at: first_at, msg })?;
            }
        }
        // A probe that one block alone streams takes that block's predicate into the
        // kernel where it can.
        for (sub, blocks) in subs.iter_mut().zip(&by_sub) {
            if let [b] = blocks.as_slice() {
                if let Some(f) = program.blocks[*b].pred.as_ref().and_then(|p| push::filter(p, &args)) {
                    if explain {
                        wasmtap_sdk::log(Level::Info, &format!("block {}: its predicate filters in the kernel", b + 1));
                    }
                    sub.filter = f;
                }
            }
        }
        let mut maps: Vec<(String, Map)> = Vec::new();
        for block in &program.blocks {
            declare(&block.body, &mut maps)?;
        }
        let mut plan = Plan::new(subs);
        for p in pushed {
            let id = plan.aggregate(p.aggregation);
            if let Some((_, m)) = maps.iter_mut().find(|(n, _)| *n == p.map) {
                *m = Map::Kernel { id, kind: p.kind, keys: p.keys };
            }
        }
        let interp = Interp { maps, args, ..Interp::default() };
        let exit_maps = !program.config.no_exit_maps;
        let script = Script { blocks: program.blocks, by_sub, probe_of, interp, exit_maps, ..Script::default() };
        Ok((script, plan))
    }
}

/// Run one block: its predicate, then its statements. Scratch variables are the block's.
fn run_block(interp: &mut Interp, block: &Block, cx: &Ctx<'_, '_>) -> Result<(), eval::Fault> {
    if !interp.vars.is_empty() {
        interp.vars.clear();
    }
    if let Some(pred) = &block.pred {
        if interp.int(pred, cx)? == 0 {
            return Ok(());
        }
    }
    interp.run(&block.body, cx)
}

/// A probe `missing_probes` leaves out, said if it says `warn`.
fn skipped(missing: parse::Missing, probe: &str, why: &str) {
    if missing == parse::Missing::Warn {
        wasmtap_sdk::log(Level::Warn, &format!("`{probe}` is left out (missing_probes): {why}"));
    }
}

/// Log a run-time fault, each distinct message once (at most [`FAULTS_LOGGED`]).
fn note(faults: &mut HashSet<String>, msg: String) {
    if faults.len() < FAULTS_LOGGED && faults.insert(msg.clone()) {
        wasmtap_sdk::log(Level::Error, &msg);
    }
}

/// The subscriptions a probe as bpftrace writes it stands for, with their canonical
/// names: one, or for a tracepoint with `*` each tracepoint it matches, in order.
fn subscriptions(probe: &str) -> Result<Vec<(String, Subscription)>, String> {
    if !probe.contains(['*', '?']) {
        return subscription(probe).map(|s| vec![s]);
    }
    match probe.split(':').collect::<Vec<_>>().as_slice() {
        ["tracepoint" | "t", cat, name] if !probe.contains('?') => {
            let names = wasmtap_sdk::expand(&format!("tracepoint:{cat}:{name}"))?;
            Ok(names.into_iter().map(|n| (n.clone(), Subscription::new(&n))).collect())
        }
        _ => Err(format!("`{probe}`: wildcards (`*`) are supported in tracepoint probes only")),
    }
}

/// The subscription a probe as bpftrace writes it stands for, and its canonical name.
fn subscription(probe: &str) -> Result<(String, Subscription), String> {
    let parts: Vec<&str> = probe.split(':').collect();
    let name = match parts.as_slice() {
        ["BEGIN"] => return Ok(("BEGIN".into(), Subscription::new("begin"))),
        ["END"] => return Ok(("END".into(), Subscription::new("end"))),
        ["tracepoint" | "t", cat, name] => format!("tracepoint:{cat}:{name}"),
        ["interval" | "i", unit @ ("s" | "ms" | "us"), n] if n.parse::<u64>().is_ok_and(|n| n > 0) => {
            format!("interval:{unit}:{n}")
        }
        ["interval" | "i", ..] => {
            return Err(format!("`{probe}`: an interval is interval:s:N, interval:ms:N or interval:us:N"))
        }
        ["profile" | "p", "hz", n] if n.parse::<u64>().is_ok_and(|n| n > 0) => format!("profile:hz:{n}"),
        ["profile" | "p", ..] => return Err(format!("`{probe}`: a profile probe is profile:hz:N")),
        ["software" | "s", event, period] if period.parse::<u64>().is_ok_and(|n| n > 0) => {
            format!("software:{event}:{period}")
        }
        ["uprobe" | "u", binary, function] => format!("uprobe:{binary}:{function}"),
        ["uretprobe" | "ur", binary, function] => format!("uretprobe:{binary}:{function}"),
        ["usdt" | "U", binary, provider, name] => format!("usdt:{binary}:{provider}:{name}"),
        ["kprobe" | "k" | "kretprobe" | "kr" | "kfunc" | "f" | "fentry" | "kretfunc" | "fexit" | "fr", ..] => {
            return Err(format!(
                "`{probe}`: kprobes and fentry are not available on this kernel (not configured, or refused); \
                 use a tracepoint (`wasmtap list 'tracepoint:*'`)"
            ))
        }
        [class, ..] if ["tracepoint", "t", "BEGIN", "END"].contains(class) => {
            return Err(format!("`{probe}`: a tracepoint is tracepoint:CATEGORY:NAME"))
        }
        _ => return Err(format!("`{probe}`: probes of this kind are not supported in scripts yet")),
    };
    Ok((name.clone(), Subscription::new(&name)))
}

/// Every `args.FIELD` of `block` is a field of each of its tracepoints whose layout is
/// known, or the error names the first that is not, at its column.
fn check_fields(
    block: &Block,
    probes: &[(String, Subscription)],
    layouts: &HashMap<String, wasmtap_sdk::ProbeSchema>,
) -> Result<(), SyntaxError> {
    let mut missing = None;
    each_expr(block, &mut |e| {
        if let parse::Expr::Arg(field, at) = e {
            for (probe, _) in probes {
                let Some(schema) = layouts.get(probe) else { continue };
                if missing.is_none() && !schema.fields.iter().any(|f| f.name == *field) {
                    let names: Vec<&str> = schema
                        .fields
                        .iter()
                        .filter(|f| !f.name.starts_with("common_"))
                        .map(|f| f.name.as_str())
                        .collect();
                    missing = Some(SyntaxError {
                        at: *at,
                        msg: format!("{probe} has no field `{field}` (it has: {})", names.join(", ")),
                    });
                }
            }
        }
    });
    missing.map_or(Ok(()), Err)
}

/// A pointer whose string a block reads, with where it is written: a tracepoint's field
/// (`str(args.filename)`), a user probe's argument (`str(arg0)`, `str(retval)`).
enum Want {
    Field(String, usize),
    UserArg(String, usize),
}

/// Each block's [`Want`]s: pointers `str()` reads, and pointers stored into a map or a
/// variable that `str()` reads somewhere (`@name[tid] = args.filename` at a syscall's
/// entry, `str(@name[tid])` at its exit: the string is the one the entry saw).
fn strings_of(blocks: &[Block]) -> Vec<Vec<Want>> {
    use parse::{Expr, B};
    fn pointer(e: &Expr) -> Option<Want> {
        match e {
            Expr::Arg(f, at) => Some(Want::Field(f.clone(), *at)),
            Expr::Builtin(B::Arg(i), at) => Some(Want::UserArg(format!("arg{i}"), *at)),
            Expr::Builtin(B::Retval, at) => Some(Want::UserArg("retval".into(), *at)),
            _ => None,
        }
    }
    let (mut maps, mut vars) = (Vec::new(), Vec::new());
    for block in blocks {
        each_expr(block, &mut |e| {
            if let Expr::Str1(inner, _) = e {
                match &**inner {
                    Expr::Map { map, .. } => maps.push(map.clone()),
                    Expr::Var(v, _) => vars.push(v.clone()),
                    _ => {}
                }
            }
        });
    }
    blocks
        .iter()
        .map(|block| {
            let mut want = Vec::new();
            each_expr(block, &mut |e| {
                if let Expr::Str1(inner, _) = e {
                    want.extend(pointer(inner));
                }
            });
            each_stmt(&block.body, &mut |s| match s {
                Stmt::Store { map, value, .. } if maps.contains(map) => want.extend(pointer(value)),
                Stmt::Let { var, value } if vars.contains(var) => want.extend(pointer(value)),
                _ => {}
            });
            want
        })
        .collect()
}

/// Every statement of `body`, those inside `if` included.
fn each_stmt(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in body {
        f(s);
        match s {
            Stmt::If { then, otherwise, .. } => {
                each_stmt(then, f);
                each_stmt(otherwise, f);
            }
            Stmt::While { body, .. } | Stmt::Unroll { body, .. } | Stmt::For { body, .. } => each_stmt(body, f),
            _ => {}
        }
    }
}

/// Every expression of a block, its predicate's and its statements', and each of
/// their parts.
fn each_expr(block: &Block, f: &mut impl FnMut(&parse::Expr)) {
    use parse::Expr;
    fn expr(e: &Expr, f: &mut impl FnMut(&Expr)) {
        f(e);
        match e {
            Expr::Map { keys, .. } => keys.iter().for_each(|k| expr(k, f)),
            Expr::Unary(_, a) | Expr::Str1(a, None) => expr(a, f),
            Expr::Str1(a, Some(b)) | Expr::Binary(_, a, b, _) => {
                expr(a, f);
                expr(b, f);
            }
            Expr::Ternary(a, b, c) => [a, b, c].into_iter().for_each(|e| expr(e, f)),
            Expr::Call(_, args, _) => args.iter().for_each(|a| expr(a, f)),
            _ => {}
        }
    }
    if let Some(p) = &block.pred {
        expr(p, f);
    }
    each_stmt(&block.body, &mut |s| match s {
        Stmt::Aggregate { keys, value, .. } => keys.iter().chain(value).for_each(|e| expr(e, f)),
        Stmt::Store { keys, value, .. } => keys.iter().chain(Some(value)).for_each(|e| expr(e, f)),
        Stmt::Delete { keys, .. } => keys.iter().for_each(|e| expr(e, f)),
        Stmt::Let { value, .. } | Stmt::Expr(value) => expr(value, f),
        Stmt::Printf { args, .. } => args.iter().for_each(|e| expr(e, f)),
        Stmt::If { cond, .. } | Stmt::While { cond, .. } => expr(cond, f),
        Stmt::For { from, to, .. } => {
            expr(from, f);
            expr(to, f);
        }
        _ => {}
    });
}

/// The stacks a block's statements and predicate use (`kstack`, `ustack`): its probes
/// record them.
///
/// A block that names addresses (`ksym()`, `usym()`) records that side's stacks too:
/// a run whose records hold addresses keeps what the host's symbolizer needs to name
/// them (the kernel's symbols, the processes' memory maps) after its probes attach.
fn stacks_of(block: &Block) -> StackMode {
    use parse::{Expr, B, F};
    let mut m = StackMode::empty();
    each_expr(block, &mut |e| match e {
        Expr::Builtin(B::Kstack, _) | Expr::Call(F::Ksym, ..) => m = m | StackMode::KERNEL,
        Expr::Builtin(B::Ustack, _) | Expr::Call(F::Usym, ..) => m = m | StackMode::USER,
        _ => {}
    });
    m
}

/// Every map the statements use, with its kind, in order of first use; a map used two
/// ways is an error.
fn declare(body: &[Stmt], maps: &mut Vec<(String, Map)>) -> Result<(), SyntaxError> {
    for s in body {
        match s {
            Stmt::Aggregate { map, keys, fold: parse::Fold::Stats, at, .. } => {
                let keyed = !keys.is_empty();
                match maps.iter().find(|(n, _)| n == map) {
                    None => maps.push((map.clone(), Map::Stats { values: Default::default(), keyed })),
                    Some((_, Map::Stats { keyed: k, .. })) if *k == keyed => {}
                    Some(_) => return Err(SyntaxError { at: *at, msg: format!("@{map} is used as two kinds of map") }),
                }
            }
            Stmt::Aggregate { map, keys, fold, at, .. } => {
                let keyed = !keys.is_empty();
                match maps.iter().find(|(n, _)| n == map) {
                    None => maps.push((map.clone(), Map::Agg { agg: eval::new_agg(fold), keys: keys.len() })),
                    Some((_, Map::Agg { agg, keys: k }))
                        if agg.kind() == eval::new_agg(fold).kind() && (*k > 0) == keyed => {}
                    Some(_) => return Err(SyntaxError { at: *at, msg: format!("@{map} is used as two kinds of map") }),
                }
            }
            Stmt::Store { map, keys, at, .. } => {
                let keyed = !keys.is_empty();
                match maps.iter().find(|(n, _)| n == map) {
                    None => maps.push((map.clone(), Map::Plain { values: Default::default(), keyed })),
                    Some((_, Map::Plain { keyed: k, .. })) if *k == keyed => {}
                    Some(_) => return Err(SyntaxError { at: *at, msg: format!("@{map} is used as two kinds of map") }),
                }
            }
            Stmt::If { then, otherwise, .. } => {
                declare(then, maps)?;
                declare(otherwise, maps)?;
            }
            Stmt::While { body, .. } | Stmt::Unroll { body, .. } | Stmt::For { body, .. } => declare(body, maps)?,
            _ => {}
        }
    }
    Ok(())
}

/// `msg` at its line and column, with the line and a caret under the column.
pub fn located(src: &str, e: &SyntaxError) -> String {
    let at = e.at.min(src.len());
    let line_start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = src[at..].find('\n').map_or(src.len(), |i| at + i);
    let line_no = src[..at].matches('\n').count() + 1;
    let col = src[line_start..at].chars().count() + 1;
    let text = &src[line_start..line_end];
    let caret: String = text.chars().take(col - 1).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    format!("{}:{line_no}:{col}: {}\n{text}\n{caret}^", "program", e.msg)
}

export_plugin!(Script);

#[cfg(test)]
mod tests;
