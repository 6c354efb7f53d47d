//! bpftrace's grammar, the subset docs/one-liners.md lists: probes, predicates, action
//! blocks, maps, variables, printf.

use crate::lex::{err, skip, token, SyntaxError, Tok};

#[derive(Debug)]
pub struct Program {
    pub blocks: Vec<Block>,
    pub config: Config,
}

/// A `config = { … }` block's settings (bpftrace 0.20's), where the program has one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `missing_probes`: what a probe that cannot attach does.
    pub missing_probes: Missing,
    /// `print_maps_on_exit = false`: the maps are not printed at the end.
    pub no_exit_maps: bool,
}

/// `missing_probes = "error" | "warn" | "ignore"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Missing {
    #[default]
    Error,
    Warn,
    Ignore,
}

#[derive(Debug)]
pub struct Block {
    /// The probes as written, each with where it starts.
    pub probes: Vec<(String, usize)>,
    pub pred: Option<Expr>,
    pub body: Vec<Stmt>,
}

/// What a map statement keeps.
#[derive(Debug, Clone, PartialEq)]
pub enum Fold {
    Count,
    Sum,
    Avg,
    /// `stats()`: count, average and total.
    Stats,
    Min,
    Max,
    Hist,
    Lhist(i64, i64, i64),
}

/// Where a statement's map is among the interpreter's maps: found by name the first
/// time, then kept.
#[derive(Debug, Clone, Default)]
pub struct Slot(std::cell::Cell<Option<usize>>);

impl Slot {
    pub fn get(&self) -> Option<usize> {
        self.0.get()
    }

    pub fn set(&self, i: usize) {
        self.0.set(Some(i));
    }
}

#[derive(Debug)]
pub enum Stmt {
    /// `@m[k] = count()`, `sum(v)`, …: an aggregation.
    Aggregate {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        keys: Vec<Expr>,
        fold: Fold,
        value: Option<Expr>,
        at: usize,
    },
    /// `@m[k] = v`, `@m[k]++`, `@m[k] += v`: a plain value.
    Store {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        keys: Vec<Expr>,
        op: Option<Op>,
        value: Expr,
        at: usize,
    },
    Let {
        var: String,
        value: Expr,
    },
    Printf {
        fmt: crate::printf::Format,
        args: Vec<Expr>,
        at: usize,
    },
    Print {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        /// `print(@m, N)`: only the N largest values.
        top: Option<usize>,
        at: usize,
    },
    Clear {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        at: usize,
    },
    Zero {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        at: usize,
    },
    Delete {
        map: String,
        /// Its index among the maps, found at the first run.
        slot: Slot,
        keys: Vec<Expr>,
        at: usize,
    },
    /// `exit()`: end the run after this action.
    Exit,
    /// `time(FORMAT)`: print the event's wall-clock time, strftime's way.
    Time(String),
    /// `while (cond) { … }`; `unroll(N) { … }` is one with a count; `for ($v : A..B)`
    /// runs with `$v` from A up to B, B left out. Bounded by the plugin's deadline.
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Unroll {
        times: i64,
        body: Vec<Stmt>,
    },
    For {
        var: String,
        from: Expr,
        to: Expr,
        body: Vec<Stmt>,
    },
    /// `break`, `continue`: of the innermost loop.
    Break,
    Continue,
    If {
        cond: Expr,
        then: Vec<Stmt>,
        otherwise: Vec<Stmt>,
    },
    Expr(Expr),
}

#[derive(Debug, Clone)]
pub enum Expr {
    Int(i64),
    Str(String),
    /// `pid`, `comm`, `nsecs`…
    Builtin(B, usize),
    /// `args.NAME`, `args->NAME`.
    Arg(String, usize),
    Var(String, usize),
    Pos(u32),
    PosCount,
    Map {
        map: String,
        slot: Slot,
        keys: Vec<Expr>,
        at: usize,
    },
    Unary(Op, Box<Expr>),
    Binary(Op, Box<Expr>, Box<Expr>, usize),
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `str(e)`, `str(e, length)`: the length counts the NUL, as bpftrace's does.
    Str1(Box<Expr>, Option<Box<Expr>>),
    /// A function of its arguments, or a tuple of them.
    Call(F, Vec<Expr>, usize),
}

/// What a [`Expr::Call`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F {
    /// `(a, b)`: a tuple; as a map's key, its parts are the key's.
    Tuple,
    /// `strftime(FORMAT, nsecs)`: the wall-clock time of a timestamp, as text.
    Strftime,
    /// `usym(addr)`, `ksym(addr)`: the function an address of the traced process, or of
    /// the kernel, is in.
    Usym,
    Ksym,
}

/// A builtin variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum B {
    Pid,
    Tid,
    Uid,
    Gid,
    Comm,
    Nsecs,
    Elapsed,
    Cgroup,
    Probe,
    Retval,
    /// The CPU a profile or software event was taken on.
    Cpu,
    /// `arg0`..`arg11`: a uprobe's arguments, a USDT probe's.
    Arg(u8),
    /// The kernel stack (`kstack`), the user stack (`ustack`): keys, printed symbolized.
    Kstack,
    Ustack,
}

/// An operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    Xor,
    Shl,
    Shr,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Not,
    Neg,
    BitNot,
}

impl Op {
    /// A binary operator as written.
    pub fn binary(text: &str) -> Option<Op> {
        Some(match text {
            "+" => Op::Add,
            "-" => Op::Sub,
            "*" => Op::Mul,
            "/" => Op::Div,
            "%" => Op::Rem,
            "&" => Op::BitAnd,
            "|" => Op::BitOr,
            "^" => Op::Xor,
            "<<" => Op::Shl,
            ">>" => Op::Shr,
            "==" => Op::Eq,
            "!=" => Op::Ne,
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            ">=" => Op::Ge,
            "&&" => Op::And,
            "||" => Op::Or,
            _ => return None,
        })
    }
}

const BUILTINS: &[(&str, B)] = &[
    ("pid", B::Pid),
    ("tid", B::Tid),
    ("uid", B::Uid),
    ("gid", B::Gid),
    ("comm", B::Comm),
    ("nsecs", B::Nsecs),
    ("elapsed", B::Elapsed),
    ("cgroup", B::Cgroup),
    ("probe", B::Probe),
    ("cpu", B::Cpu),
    ("kstack", B::Kstack),
    ("ustack", B::Ustack),
    ("retval", B::Retval),
];
/// The kernel headers' constants that bpftrace's tools take from their `#include`s.
const KERNEL_CONSTANTS: &[(&str, i64)] = &[
    // linux/sched.h: task states.
    ("TASK_RUNNING", 0),
    ("TASK_INTERRUPTIBLE", 1),
    ("TASK_UNINTERRUPTIBLE", 2),
    // linux/socket.h: address families.
    ("AF_INET", 2),
    ("AF_INET6", 10),
];
const FOLDS: &[&str] = &["count", "sum", "avg", "min", "max", "hist", "lhist", "stats"];
/// Known but not yet interpreted: refused with this reason.
const LATER: &[(&str, &str)] = &[("join", "join() is not supported in scripts yet")];

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// A `/` ends the predicate here instead of dividing (inside parentheses it divides).
    in_pred: bool,
    /// Loops the parser is inside.
    loops: u32,
}

/// Parse a whole program.
pub fn parse(src: &str) -> Result<Program, SyntaxError> {
    let mut p = Parser { src, pos: 0, in_pred: false, loops: 0 };
    let mut blocks = Vec::new();
    p.pos = skip(src, p.pos)?;
    let config = p.config()?;
    loop {
        p.pos = skip(src, p.pos)?;
        if p.pos >= src.len() {
            break;
        }
        blocks.push(p.block()?);
    }
    if blocks.is_empty() {
        return err(0, "no probes: a program is `PROBE[, PROBE…] [/PREDICATE/] { ACTIONS }`");
    }
    Ok(Program { blocks, config })
}

impl Parser<'_> {
    fn peek(&self) -> Result<(Tok, usize, usize), SyntaxError> {
        token(self.src, self.pos)
    }

    fn next(&mut self) -> Result<(Tok, usize), SyntaxError> {
        let (t, start, end) = self.peek()?;
        self.pos = end;
        Ok((t, start))
    }

    fn is(&self, punct: &str) -> Result<bool, SyntaxError> {
        Ok(matches!(self.peek()?.0, Tok::Punct(p) if p == punct))
    }

    fn eat(&mut self, punct: &str) -> Result<bool, SyntaxError> {
        if self.is(punct)? {
            self.next()?;
            return Ok(true);
        }
        Ok(false)
    }

    fn expect(&mut self, punct: &str) -> Result<usize, SyntaxError> {
        let (t, at, _) = self.peek()?;
        match t {
            Tok::Punct(p) if p == punct => {
                self.next()?;
                Ok(at)
            }
            other => err(at, format!("syntax error, unexpected {}, expecting {punct}", describe(&other))),
        }
    }

    /// `config = { KEY = VALUE; … }` before the probes, if the program starts with one.
    fn config(&mut self) -> Result<Config, SyntaxError> {
        let mut config = Config::default();
        let rest = &self.src[self.pos..];
        let Some(after) = rest.strip_prefix("config") else { return Ok(config) };
        if !skip(after, 0).is_ok_and(|i| after[i..].starts_with('=') && !after[i..].starts_with("==")) {
            return Ok(config);
        }
        self.next()?;
        self.expect("=")?;
        self.expect("{")?;
        loop {
            if self.eat("}")? {
                return Ok(config);
            }
            if self.eat(";")? {
                continue;
            }
            let (key, at) = match self.next()? {
                (Tok::Ident(k), at) => (k, at),
                (t, at) => {
                    return err(at, format!("syntax error, unexpected {}, expecting a config key", describe(&t)))
                }
            };
            self.expect("=")?;
            let (value, vat) = self.next()?;
            let word = match &value {
                Tok::Str(s) | Tok::Ident(s) => Some(s.as_str()),
                _ => None,
            };
            match (key.as_str(), word, &value) {
                ("missing_probes", Some(w @ ("error" | "warn" | "ignore")), _) => {
                    config.missing_probes = match w {
                        "error" => Missing::Error,
                        "warn" => Missing::Warn,
                        _ => Missing::Ignore,
                    }
                }
                ("missing_probes", ..) => {
                    return err(vat, "missing_probes is \"error\", \"warn\" or \"ignore\"");
                }
                ("print_maps_on_exit", Some(w @ ("true" | "false")), _) => config.no_exit_maps = w == "false",
                ("print_maps_on_exit", _, Tok::Int(n @ (0 | 1))) => config.no_exit_maps = *n == 0,
                ("print_maps_on_exit", ..) => return err(vat, "print_maps_on_exit is true or false"),
                // Limits the sandbox sets itself: accepted, with no effect.
                ("max_strlen" | "max_map_keys" | "perf_rb_pages" | "log_size" | "max_probes", _, Tok::Int(_)) => {}
                _ => {
                    return err(
                        at,
                        format!("config key `{key}` is not supported here (missing_probes and print_maps_on_exit are)"),
                    )
                }
            }
        }
    }

    /// Probes up to the predicate or the block, then both.
    fn block(&mut self) -> Result<Block, SyntaxError> {
        let mut probes = Vec::new();
        loop {
            self.pos = skip(self.src, self.pos)?;
            let start = self.pos;
            let b = self.src.as_bytes();
            let text = &self.src[start..];
            // A uprobe's path has slashes; elsewhere a slash starts the predicate.
            let path = ["u:", "uprobe:", "ur:", "uretprobe:", "U:", "usdt:"].iter().any(|p| text.starts_with(p));
            let mut end = start;
            while end < b.len() && !b" \t\r\n{,".contains(&b[end]) && (path || b[end] != b'/') {
                end += 1;
            }
            if end == start {
                return err(start, "syntax error: expected a probe");
            }
            probes.push((self.src[start..end].to_string(), start));
            self.pos = skip(self.src, end)?;
            if self.src[self.pos..].starts_with(',') {
                self.pos += 1;
                continue;
            }
            break;
        }
        let mut pred = None;
        if self.src[self.pos..].starts_with('/') {
            self.pos += 1;
            self.in_pred = true;
            let e = self.expr()?;
            self.in_pred = false;
            self.expect("/")?;
            pred = Some(e);
        }
        let body = self.body()?;
        Ok(Block { probes, pred, body })
    }

    fn body(&mut self) -> Result<Vec<Stmt>, SyntaxError> {
        self.expect("{")?;
        let mut out = Vec::new();
        loop {
            if self.eat("}")? {
                return Ok(out);
            }
            if self.eat(";")? {
                continue;
            }
            out.push(self.stmt()?);
            if !self.is("}")? && !self.is(";")? {
                let (t, at, _) = self.peek()?;
                if !matches!(
                    out.last(),
                    Some(Stmt::If { .. } | Stmt::While { .. } | Stmt::Unroll { .. } | Stmt::For { .. })
                ) {
                    return err(at, format!("syntax error, unexpected {}, expecting ; or }}", describe(&t)));
                }
            }
        }
    }

    /// A loop's body: `break` and `continue` may stand in it.
    fn loop_body(&mut self) -> Result<Vec<Stmt>, SyntaxError> {
        self.loops += 1;
        let body = self.body();
        self.loops -= 1;
        body
    }

    fn map_name(&mut self) -> Result<(String, usize), SyntaxError> {
        match self.next()? {
            (Tok::Map(m), at) => Ok((m, at)),
            (t, at) => err(at, format!("syntax error, unexpected {}, expecting a map", describe(&t))),
        }
    }

    fn keys(&mut self) -> Result<Vec<Expr>, SyntaxError> {
        let mut keys = Vec::new();
        if self.eat("[")? {
            loop {
                keys.push(self.expr()?);
                if self.eat("]")? {
                    break;
                }
                self.expect(",")?;
            }
        }
        Ok(keys)
    }

    fn stmt(&mut self) -> Result<Stmt, SyntaxError> {
        let (t, at, _) = self.peek()?;
        match t {
            Tok::Map(_) => {
                let (map, at) = self.map_name()?;
                let keys = self.keys()?;
                for op in ["++", "--"] {
                    if self.eat(op)? {
                        let value = Expr::Int(if op == "++" { 1 } else { -1 });
                        return Ok(Stmt::Store { map, slot: Slot::default(), keys, op: Some(Op::Add), value, at });
                    }
                }
                for op in ["+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="] {
                    if self.eat(op)? {
                        let value = self.expr()?;
                        return Ok(Stmt::Store { map, slot: Slot::default(), keys, op: Some(op_of(op)), value, at });
                    }
                }
                self.expect("=")?;
                if let (Tok::Ident(f), fat, _) = self.peek()? {
                    if FOLDS.contains(&f.as_str()) && self.src[skip(self.src, fat + f.len())?..].starts_with('(') {
                        return self.fold(map, keys, &f, fat, at);
                    }
                }
                let value = self.expr()?;
                Ok(Stmt::Store { map, slot: Slot::default(), keys, op: None, value, at })
            }
            Tok::Var(v) => {
                self.next()?;
                for op in ["++", "--"] {
                    if self.eat(op)? {
                        let value = Expr::Int(if op == "++" { 1 } else { -1 });
                        let sum = Expr::Binary(Op::Add, Box::new(Expr::Var(v.clone(), at)), Box::new(value), at);
                        return Ok(Stmt::Let { var: v, value: sum });
                    }
                }
                for op in ["+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="] {
                    if self.eat(op)? {
                        let rhs = self.expr()?;
                        let value = Expr::Binary(op_of(op), Box::new(Expr::Var(v.clone(), at)), Box::new(rhs), at);
                        return Ok(Stmt::Let { var: v, value });
                    }
                }
                self.expect("=")?;
                let value = self.expr()?;
                Ok(Stmt::Let { var: v, value })
            }
            Tok::Ident(name) => match name.as_str() {
                "if" => {
                    self.next()?;
                    self.expect("(")?;
                    let cond = self.expr()?;
                    self.expect(")")?;
                    let then = self.body()?;
                    let mut otherwise = Vec::new();
                    if matches!(self.peek()?.0, Tok::Ident(ref e) if e == "else") {
                        self.next()?;
                        if matches!(self.peek()?.0, Tok::Ident(ref i) if i == "if") {
                            otherwise.push(self.stmt()?);
                        } else {
                            otherwise = self.body()?;
                        }
                    }
                    Ok(Stmt::If { cond, then, otherwise })
                }
                "exit" => {
                    self.next()?;
                    self.expect("(")?;
                    self.expect(")")?;
                    Ok(Stmt::Exit)
                }
                "while" => {
                    self.next()?;
                    self.expect("(")?;
                    let cond = self.expr()?;
                    self.expect(")")?;
                    Ok(Stmt::While { cond, body: self.loop_body()? })
                }
                "unroll" => {
                    self.next()?;
                    self.expect("(")?;
                    let times = match self.next()? {
                        (Tok::Int(n), _) if (1..=100).contains(&n) => n,
                        (t, at) => return err(at, format!("unroll takes a count from 1 to 100, not {}", describe(&t))),
                    };
                    self.expect(")")?;
                    Ok(Stmt::Unroll { times, body: self.loop_body()? })
                }
                "for" => {
                    self.next()?;
                    self.expect("(")?;
                    let var = match self.next()? {
                        (Tok::Var(v), _) => v,
                        (t, at) => {
                            return err(at, format!("syntax error, unexpected {}, expecting $variable", describe(&t)))
                        }
                    };
                    self.expect(":")?;
                    if matches!(self.peek()?.0, Tok::Map(_)) {
                        let (_, at, _) = self.peek()?;
                        return err(at, "for loops over maps are not supported yet; a range is: for ($i : 0..10)");
                    }
                    let from = self.expr()?;
                    self.expect("..")?;
                    let to = self.expr()?;
                    self.expect(")")?;
                    Ok(Stmt::For { var, from, to, body: self.loop_body()? })
                }
                "break" | "continue" => {
                    let (_, at) = self.next()?;
                    if self.loops == 0 {
                        return err(at, format!("{name} outside a loop"));
                    }
                    Ok(if name == "break" { Stmt::Break } else { Stmt::Continue })
                }
                "time" => {
                    self.next()?;
                    self.expect("(")?;
                    let fmt = match self.peek()? {
                        (Tok::Str(_), ..) => match self.next()? {
                            (Tok::Str(s), _) => s,
                            _ => unreachable!("peeked"),
                        },
                        (Tok::Punct(")"), ..) => "%H:%M:%S\n".to_string(),
                        (t, at, _) => {
                            return err(at, format!("time: the format must be a string, not {}", describe(&t)))
                        }
                    };
                    self.expect(")")?;
                    Ok(Stmt::Time(fmt))
                }
                "printf" => {
                    self.next()?;
                    self.expect("(")?;
                    let fmt = match self.next()? {
                        (Tok::Str(s), _) => s,
                        (t, at) => {
                            return err(
                                at,
                                format!("printf: the first argument must be a string, not {}", describe(&t)),
                            )
                        }
                    };
                    let mut args = Vec::new();
                    while self.eat(",")? {
                        args.push(self.expr()?);
                    }
                    self.expect(")")?;
                    let fmt =
                        crate::printf::compile(&fmt, args.len()).map_err(|msg| crate::lex::SyntaxError { at, msg })?;
                    Ok(Stmt::Printf { fmt, args, at })
                }
                "print" | "clear" | "zero" | "delete" => {
                    self.next()?;
                    self.expect("(")?;
                    let (map, mat) = self.map_name()?;
                    let mut keys = self.keys()?;
                    // bpftrace 0.21's `delete(@m, key)`.
                    if name == "delete" && keys.is_empty() && self.eat(",")? {
                        keys.push(self.expr()?);
                    }
                    let mut top = None;
                    if name == "print" && self.eat(",")? {
                        top = match self.next()? {
                            (Tok::Int(n), _) if n >= 0 => Some(n as usize),
                            (t, at) => {
                                return err(
                                    at,
                                    format!("print: the top count must be an integer, not {}", describe(&t)),
                                )
                            }
                        };
                    }
                    self.expect(")")?;
                    if name != "delete" && !keys.is_empty() {
                        return err(mat, format!("{name}() takes a whole map, without keys"));
                    }
                    Ok(match name.as_str() {
                        "print" => Stmt::Print { map, slot: Slot::default(), top, at },
                        "clear" => Stmt::Clear { map, slot: Slot::default(), at },
                        "zero" => Stmt::Zero { map, slot: Slot::default(), at },
                        _ => Stmt::Delete { map, slot: Slot::default(), keys, at },
                    })
                }
                _ => Ok(Stmt::Expr(self.expr()?)),
            },
            _ => Ok(Stmt::Expr(self.expr()?)),
        }
    }

    /// `f(…)` at `at` assigned to `map` at `map_at`.
    fn fold(&mut self, map: String, keys: Vec<Expr>, f: &str, at: usize, map_at: usize) -> Result<Stmt, SyntaxError> {
        if let Some((_, why)) = LATER.iter().find(|(n, _)| *n == f) {
            return err(at, *why);
        }
        self.next()?;
        let mut args = self.call_args()?;
        let want = match f {
            "count" => 0,
            "lhist" => 4,
            _ => 1,
        };
        if args.len() != want {
            return err(
                at,
                format!("{f}() takes {want} argument{}, not {}", if want == 1 { "" } else { "s" }, args.len()),
            );
        }
        let fold = match f {
            "count" => Fold::Count,
            "sum" => Fold::Sum,
            "avg" => Fold::Avg,
            "stats" => Fold::Stats,
            "min" => Fold::Min,
            "max" => Fold::Max,
            "hist" => Fold::Hist,
            _ => {
                let int = |e: &Expr, what: &str| match e {
                    Expr::Int(v) => Ok(*v),
                    Expr::Unary(Op::Neg, inner) => match **inner {
                        Expr::Int(v) => Ok(-v),
                        _ => err(at, format!("lhist(): {what} must be an integer literal")),
                    },
                    _ => err(at, format!("lhist(): {what} must be an integer literal")),
                };
                let (min, max, step) = (int(&args[1], "min")?, int(&args[2], "max")?, int(&args[3], "step")?);
                if step <= 0 || max <= min {
                    return err(at, "lhist(): needs min < max and a step above 0");
                }
                Fold::Lhist(min, max, step)
            }
        };
        let value = (fold != Fold::Count).then(|| args.swap_remove(0));
        Ok(Stmt::Aggregate { map, slot: Slot::default(), keys, fold, value, at: map_at })
    }

    /// A call's arguments, `(a, b…)` or `()`.
    fn call_args(&mut self) -> Result<Vec<Expr>, SyntaxError> {
        self.expect("(")?;
        let mut args = Vec::new();
        if !self.is(")")? {
            loop {
                args.push(self.expr()?);
                if !self.eat(",")? {
                    break;
                }
            }
        }
        self.expect(")")?;
        Ok(args)
    }

    pub fn expr(&mut self) -> Result<Expr, SyntaxError> {
        let cond = self.binary(0)?;
        if self.eat("?")? {
            let a = self.expr()?;
            self.expect(":")?;
            let b = self.expr()?;
            return Ok(Expr::Ternary(Box::new(cond), Box::new(a), Box::new(b)));
        }
        Ok(cond)
    }

    fn binary(&mut self, min: u8) -> Result<Expr, SyntaxError> {
        let mut lhs = self.unary()?;
        loop {
            let (t, at, _) = self.peek()?;
            let Tok::Punct(op) = t else { break };
            if op == "/" && self.in_pred {
                break;
            }
            let (Some(prec), Some(bin)) = (precedence(op), Op::binary(op)) else { break };
            if prec < min {
                break;
            }
            self.next()?;
            let rhs = self.binary(prec + 1)?;
            lhs = Expr::Binary(bin, Box::new(lhs), Box::new(rhs), at);
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, SyntaxError> {
        for (text, op) in [("!", Op::Not), ("-", Op::Neg), ("~", Op::BitNot)] {
            if self.eat(text)? {
                return Ok(Expr::Unary(op, Box::new(self.unary()?)));
            }
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, SyntaxError> {
        let (t, at) = self.next()?;
        Ok(match t {
            Tok::Int(v) => Expr::Int(v),
            Tok::Str(s) => Expr::Str(s),
            Tok::Pos(n) => Expr::Pos(n),
            Tok::PosCount => Expr::PosCount,
            Tok::Var(v) => Expr::Var(v, at),
            Tok::Map(map) => {
                let keys = self.keys()?;
                Expr::Map { map, slot: Slot::default(), keys, at }
            }
            Tok::Punct("(") => {
                let pred = std::mem::replace(&mut self.in_pred, false);
                let e = self.expr()?;
                let e = if self.eat(",")? {
                    let mut parts = vec![e];
                    loop {
                        parts.push(self.expr()?);
                        if !self.eat(",")? {
                            break;
                        }
                    }
                    Expr::Call(F::Tuple, parts, at)
                } else {
                    e
                };
                self.in_pred = pred;
                self.expect(")")?;
                e
            }
            Tok::Ident(name) => {
                if let Some((_, why)) = LATER.iter().find(|(n, _)| *n == name) {
                    return err(at, *why);
                }
                match name.as_str() {
                    "args" => {
                        if !self.eat(".")? && !self.eat("->")? {
                            let (t, at, _) = self.peek()?;
                            return err(at, format!("syntax error, unexpected {}, expecting . or ->", describe(&t)));
                        }
                        match self.next()? {
                            (Tok::Ident(f), fat) => Expr::Arg(f, fat),
                            (t, at) => {
                                return err(
                                    at,
                                    format!("syntax error, unexpected {}, expecting a field name", describe(&t)),
                                )
                            }
                        }
                    }
                    "str" => {
                        self.expect("(")?;
                        let e = self.expr()?;
                        let len = if self.eat(",")? { Some(Box::new(self.expr()?)) } else { None };
                        self.expect(")")?;
                        Expr::Str1(Box::new(e), len)
                    }
                    "strftime" | "usym" | "ksym" => {
                        let (f, want) = match name.as_str() {
                            "strftime" => (F::Strftime, 2),
                            "usym" => (F::Usym, 1),
                            _ => (F::Ksym, 1),
                        };
                        let args = self.call_args()?;
                        if args.len() != want {
                            let s = if want == 1 { "" } else { "s" };
                            return err(at, format!("{name}() takes {want} argument{s}, not {}", args.len()));
                        }
                        if f == F::Strftime && !matches!(args[0], Expr::Str(_)) {
                            return err(at, "strftime(): the format must be a string");
                        }
                        Expr::Call(f, args, at)
                    }
                    n if arg_index(n).is_some() => Expr::Builtin(B::Arg(arg_index(n).unwrap_or(0)), at),
                    n if KERNEL_CONSTANTS.iter().any(|(c, _)| *c == n) => {
                        Expr::Int(KERNEL_CONSTANTS.iter().find(|(c, _)| *c == n).map_or(0, |(_, v)| *v))
                    }
                    n if BUILTINS.iter().any(|(b, _)| *b == n) => {
                        let b = BUILTINS.iter().find(|(b, _)| *b == n).map(|(_, b)| *b).unwrap_or(B::Pid);
                        Expr::Builtin(b, at)
                    }
                    n if FOLDS.contains(&n) => {
                        return err(at, format!("{n}() can only be assigned to a map: @x = {n}(…)"))
                    }
                    _ => return err(at, format!("unknown identifier `{name}`")),
                }
            }
            other => return err(at, format!("syntax error, unexpected {}", describe(&other))),
        })
    }
}

/// `argN`'s N, for N of 0 to 11 written without leading zeros.
fn arg_index(name: &str) -> Option<u8> {
    let n = name.strip_prefix("arg")?;
    let ok = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    n.parse::<u8>().ok().filter(|i| ok && *i < 12)
}

/// The operator a compound assignment applies.
fn op_of(assign: &str) -> Op {
    match assign {
        "+=" => Op::Add,
        "-=" => Op::Sub,
        "*=" => Op::Mul,
        "/=" => Op::Div,
        "%=" => Op::Rem,
        "&=" => Op::BitAnd,
        "|=" => Op::BitOr,
        "^=" => Op::Xor,
        "<<=" => Op::Shl,
        _ => Op::Shr,
    }
}

/// C's binary precedences, higher binds tighter.
fn precedence(op: &str) -> Option<u8> {
    Some(match op {
        "||" => 1,
        "&&" => 2,
        "|" => 3,
        "^" => 4,
        "&" => 5,
        "==" | "!=" => 6,
        "<" | "<=" | ">" | ">=" => 7,
        "<<" | ">>" => 8,
        "+" | "-" => 9,
        "*" | "/" | "%" => 10,
        _ => return None,
    })
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("identifier `{s}`"),
        Tok::Int(v) => format!("integer {v}"),
        Tok::Str(s) => format!("string \"{s}\""),
        Tok::Map(m) => format!("map @{m}"),
        Tok::Var(v) => format!("variable ${v}"),
        Tok::Pos(n) => format!("parameter ${n}"),
        Tok::PosCount => "$#".into(),
        Tok::Punct(p) => p.to_string(),
        Tok::Eof => "end of file".into(),
    }
}
