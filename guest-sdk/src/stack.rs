//! Stacks as aggregation keys, symbolized in batches when reported.
//!
//! bpftrace's `@[kstack, ustack] = count()` is a [`Counts<Stack>`](Counts) (or any
//! [`Agg<Stack>`](Agg)): subscribe with [`Subscription::stacks`](crate::Subscription::stacks),
//! key on [`Event::stack`](crate::Event::stack), and report with
//! [`Counts::to_stack_aggregation`] or [`Agg::to_stack_aggregation`]. Addresses stay
//! plain numbers while events flow; names are looked up only for the stacks that get
//! reported, many stacks per host call. The host renders the symbolized stacks
//! ([`Value::Stack`]) as text, folded stacks or a flame graph.

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::fmt::{self, Write as _};

use wasmtap_abi::stack::MAX_FRAMES;
use wasmtap_abi::Frames;

use crate::agg::{aggregation, keep_top, Stat};
use crate::{
    Agg, AggEntry, AggKind, AggOrder, AggValue, Aggregation, Counts, Frame, FxHashMap, Key, StackRequest, Value,
};

/// The most addresses one `symbolize` host call may carry (the host refuses more).
pub const SYMBOLIZE_MAX_ADDRS: usize = 65536;

/// Bpftrace indents each frame of a stack key by eight spaces.
const INDENT: &str = "        ";

/// A kernel stack and a user stack held by value: hashable, ordered, cheap to compare,
/// an aggregation key. Frames are instruction addresses, innermost first.
///
/// The pid says whose address space the user frames belong to; with no user frames it
/// carries no meaning, and [`Event::stack`](crate::Event::stack) sets it to 0.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stack {
    pid: u32,
    /// How many of `frames`, from the front, are kernel frames.
    kernel: usize,
    frames: Box<[u64]>,
}

impl Stack {
    /// A stack of process `pid`; each side keeps at most its innermost 127 frames
    /// (the kernel's limit).
    pub fn new(pid: u32, kernel: &[u64], user: &[u64]) -> Stack {
        let kernel = &kernel[..kernel.len().min(MAX_FRAMES)];
        let user = &user[..user.len().min(MAX_FRAMES)];
        Stack { pid, kernel: kernel.len(), frames: kernel.iter().chain(user).copied().collect() }
    }

    /// The stacks of a record's trailer ([`Event::stacks`](crate::Event::stacks)), copied.
    pub fn from_frames(pid: u32, kernel: Frames<'_>, user: Frames<'_>) -> Stack {
        let frames: Box<[u64]> = kernel.iter().take(MAX_FRAMES).chain(user.iter().take(MAX_FRAMES)).collect();
        Stack { pid, kernel: kernel.len().min(MAX_FRAMES), frames }
    }

    /// The process whose address space the user frames belong to.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Kernel frames, innermost first.
    pub fn kernel(&self) -> &[u64] {
        &self.frames[..self.kernel]
    }

    /// User frames, innermost first.
    pub fn user(&self) -> &[u64] {
        &self.frames[self.kernel..]
    }

    /// Neither side has a frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// One `symbolize` request per non-empty side.
    fn requests(&self) -> impl Iterator<Item = StackRequest> + '_ {
        [(self.kernel(), true), (self.user(), false)]
            .into_iter()
            .filter(|(addrs, _)| !addrs.is_empty())
            .map(|(addrs, kernel)| StackRequest { pid: self.pid, kernel, addrs: addrs.to_vec() })
    }
}

impl fmt::Display for Stack {
    /// Unsymbolized and folded: outermost first, user then kernel, `0x…;0x…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, addr) in self.frames.iter().rev().enumerate() {
            let sep = if i > 0 { ";" } else { "" };
            write!(f, "{sep}{addr:#x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = |addrs: &[u64]| addrs.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", ");
        write!(f, "Stack {{ pid: {}, kernel: [{}], user: [{}] }}", self.pid, hex(self.kernel()), hex(self.user()))
    }
}

impl Key for Stack {
    /// The addresses, unsymbolized ([`Display`](fmt::Display)): symbolizing key by key
    /// would cost a host call each. [`Counts::to_stack_aggregation`] prints names.
    fn to_values(&self) -> Vec<Value> {
        vec![Value::Text(self.to_string())]
    }
}

impl Frame {
    /// A frame of which nothing is known but its address.
    pub fn unknown(addr: u64) -> Frame {
        Frame { addr, symbol: String::new(), offset: 0, module: String::new(), file: String::new(), line: 0 }
    }

    /// The host found the function.
    pub fn is_known(&self) -> bool {
        !self.symbol.is_empty()
    }

    /// The frame as a folded-stack element: the function without offset; `[module]`
    /// (its file name) or the hex address when the function is unknown.
    fn folded_name(&self) -> String {
        if self.is_known() {
            return self.symbol.replace(';', ":").replace(['\n', '\r'], " ");
        }
        match self.module.rsplit('/').next() {
            Some(module) if !module.is_empty() => format!("[{module}]"),
            _ => format!("{:#x}", self.addr),
        }
    }
}

impl fmt::Display for Frame {
    /// `function+offset` (decimal offset, like bpftrace), or the hex address if unknown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.is_known() {
            true => write!(f, "{}+{}", self.symbol, self.offset),
            false => write!(f, "{:#x}", self.addr),
        }
    }
}

/// Symbolize `stacks`: for each, its kernel frames then its user frames, innermost
/// first, one [`Frame`] per address. All of them go to the host in one call, or in as
/// few as [`SYMBOLIZE_MAX_ADDRS`] allows; a frame the host could not resolve is
/// [`Frame::unknown`].
pub fn symbolize<S: Borrow<Stack>>(stacks: &[S]) -> Vec<Vec<Frame>> {
    let mut out = Vec::with_capacity(stacks.len());
    for_each_symbolized(stacks, |_, frames| out.push(frames));
    out
}

/// Symbolize `stacks` in calls of whole stacks under the address cap, handing each
/// stack's frames to `f` with its index as soon as its call returns.
fn for_each_symbolized<S: Borrow<Stack>>(stacks: &[S], mut f: impl FnMut(usize, Vec<Frame>)) {
    let mut start = 0;
    while start < stacks.len() {
        let (mut end, mut addrs) = (start, 0);
        while let Some(next) = stacks.get(end).map(|s| s.borrow().frames.len()) {
            if end > start && addrs + next > SYMBOLIZE_MAX_ADDRS {
                break;
            }
            addrs += next;
            end += 1;
        }
        symbolize_call(&stacks[start..end], |i, frames| f(start + i, frames));
        start = end;
    }
}

/// One host call for `stacks`, tolerant of a host that answers with too few frames.
fn symbolize_call<S: Borrow<Stack>>(stacks: &[S], mut f: impl FnMut(usize, Vec<Frame>)) {
    let requests: Vec<StackRequest> = stacks.iter().flat_map(|s| s.borrow().requests()).collect();
    let mut answers = match requests.is_empty() {
        true => Vec::new().into_iter(),
        false => crate::imports::symbolize(&requests).into_iter(),
    };
    for (i, stack) in stacks.iter().enumerate() {
        let stack = stack.borrow();
        let mut frames = Vec::with_capacity(stack.frames.len());
        for side in [stack.kernel(), stack.user()].into_iter().filter(|s| !s.is_empty()) {
            let mut got = answers.next().unwrap_or_default().into_iter();
            frames.extend(side.iter().map(|&addr| got.next().unwrap_or_else(|| Frame::unknown(addr))));
        }
        f(i, frames);
    }
}

/// How a symbolized stack becomes text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackStyle {
    /// bpftrace's: a newline, then one `function+offset` per line indented by eight
    /// spaces, innermost first ([`render_stack`]).
    #[default]
    Bpftrace,
    /// Folded, the input of `flamegraph.pl`: `outer;…;inner`, user frames then kernel
    /// frames ([`render_folded`]).
    Folded,
}

impl StackStyle {
    /// `frames` (innermost first) as text in this style.
    pub fn render(self, frames: &[Frame]) -> String {
        match self {
            StackStyle::Bpftrace => render_stack(frames),
            StackStyle::Folded => render_folded(frames),
        }
    }
}

/// A symbolized stack (innermost first) the way bpftrace prints `kstack`/`ustack`:
///
/// ```text
///
///         do_sys_openat2+123
///         __x64_sys_openat+85
///         do_syscall_64+130
/// ```
///
/// It starts with a newline, so `@name[` + it + `]: 7` prints like bpftrace's map.
pub fn render_stack(frames: &[Frame]) -> String {
    let mut s = String::from("\n");
    for frame in frames {
        let _ = writeln!(s, "{INDENT}{frame}");
    }
    s
}

/// A symbolized stack (innermost first) folded the way `flamegraph.pl` reads it:
/// outermost first, `;`-separated function names without offsets, so the user frames
/// come before the kernel frames (`main;read;entry_SYSCALL_64;ksys_read`).
pub fn render_folded(frames: &[Frame]) -> String {
    let names: Vec<String> = frames.iter().rev().map(Frame::folded_name).collect();
    names.join(";")
}

impl Counts<Stack> {
    /// The counters as `@name[stack]: count`, each key a [`Value::Stack`] of symbolized
    /// frames that the host renders (bpftrace-style text, folded, flame graph).
    ///
    /// Only the stacks that are sent are symbolized: with `top > 0` the `top` largest
    /// counters (ties broken by stack), with 0 all of them, in as few host calls as the
    /// address cap allows. Stacks that symbolize to the same frames (the same user
    /// addresses in two processes of one program) become one entry with the sum of
    /// their counts.
    pub fn to_stack_aggregation(&self, name: &str, title: &str, order: AggOrder, top: u32) -> Aggregation {
        let mut picked: Vec<(&Stack, i64)> = self.iter().map(|(stack, &n)| (stack, n)).collect();
        keep_top(&mut picked, top, |a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let stacks: Vec<&Stack> = picked.iter().map(|&(stack, _)| stack).collect();
        let mut merged: FxHashMap<Vec<Frame>, i64> = FxHashMap::default();
        for_each_symbolized(&stacks, |i, frames| {
            let n = merged.entry(frames).or_insert(0);
            *n = n.wrapping_add(picked[i].1);
        });
        let entries = merged
            .into_iter()
            .map(|(frames, n)| (n, AggEntry { key: vec![Value::Stack(frames)], value: AggValue::Scalar(n) }))
            .collect();
        aggregation(name, title, &["stack"], AggKind::Count, order, top, entries)
    }
}

impl Agg<Stack> {
    /// The aggregation as `@name[stack]: value`, each key a [`Value::Stack`] of
    /// symbolized frames that the host renders (bpftrace-style text, folded, flame
    /// graph); otherwise like [`Agg::to_aggregation`].
    ///
    /// Only the stacks that are sent are symbolized: with `top > 0` the `top` largest
    /// entries (ties broken by stack), with 0 all of them, in as few host calls as the
    /// address cap allows. Stacks that symbolize to the same frames (the same user
    /// addresses in two processes of one program) merge into one entry, as if their
    /// samples had been added to one key.
    pub fn to_stack_aggregation(&self, name: &str, title: &str, order: AggOrder, top: u32) -> Aggregation {
        self.report_drops(name);
        let (func, normal) = (self.func(), self.normal());
        let mut picked: Vec<_> = self.slots().map(|(stack, stat)| (stack, stat.rank(func, normal), stat)).collect();
        keep_top(&mut picked, top, |a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let stacks: Vec<&Stack> = picked.iter().map(|&(stack, _, _)| stack).collect();
        let mut merged: FxHashMap<Vec<Frame>, Stat> = FxHashMap::default();
        for_each_symbolized(&stacks, |i, frames| {
            let stat = picked[i].2;
            match merged.entry(frames) {
                Entry::Occupied(mut e) => e.get_mut().merge(stat),
                Entry::Vacant(e) => {
                    e.insert(stat.clone());
                }
            }
        });
        let entries = merged
            .into_iter()
            .map(|(frames, stat)| {
                let value = stat.value(func, normal);
                (stat.rank(func, normal), AggEntry { key: vec![Value::Stack(frames)], value })
            })
            .collect();
        aggregation(name, title, &["stack"], self.kind(), order, top, entries)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::imports::testing;

    /// A symbolizer that names `addr` `f<addr>` at offset `addr % 16`, in `mod`, and
    /// records the size of every call.
    fn fake_host() -> Rc<RefCell<Vec<Vec<StackRequest>>>> {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let seen = calls.clone();
        testing::set_symbolizer(move |reqs: &[StackRequest]| {
            seen.borrow_mut().push(reqs.to_vec());
            reqs.iter().map(|r| r.addrs.iter().map(|&a| named(a)).collect()).collect()
        });
        calls
    }

    fn named(addr: u64) -> Frame {
        let module = if addr >= 0xffff_0000 { "kernel" } else { "/usr/bin/app" };
        Frame { symbol: format!("f{:x}", addr / 16), offset: addr % 16, module: module.into(), ..Frame::unknown(addr) }
    }

    #[test]
    fn many_stacks_are_symbolized_in_one_call() {
        let calls = fake_host();
        let stacks = [Stack::new(7, &[0xffff_0010, 0xffff_0020], &[0x1010]), Stack::new(0, &[0xffff_0030], &[])];
        let frames = symbolize(&stacks);
        assert_eq!(RefCell::borrow(&calls).len(), 1);
        let call = &RefCell::borrow(&calls)[0];
        assert_eq!(call.len(), 3, "one request per non-empty side");
        assert_eq!((call[0].pid, call[0].kernel, call[1].kernel), (7, true, false));
        let names: Vec<Vec<String>> = frames.iter().map(|f| f.iter().map(|f| f.to_string()).collect()).collect();
        assert_eq!(names, [vec!["fffff001+0", "fffff002+0", "f101+0"], vec!["fffff003+0"]]);
    }

    #[test]
    fn calls_stay_under_the_address_cap_and_keep_stacks_whole() {
        let calls = fake_host();
        let kernel: Vec<u64> = (0..127).map(|i| 0xffff_0000 + i).collect();
        let user: Vec<u64> = (0..127).map(|i| 0x1000 + i).collect();
        let stacks: Vec<Stack> = (0..600).map(|pid| Stack::new(pid, &kernel, &user)).collect();
        let frames = symbolize(&stacks.iter().collect::<Vec<_>>());
        let sizes: Vec<usize> = RefCell::borrow(&calls).iter().map(|c| c.iter().map(|r| r.addrs.len()).sum()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 600 * 254);
        assert_eq!(sizes.len(), (600 * 254_usize).div_ceil(SYMBOLIZE_MAX_ADDRS));
        assert!(sizes.iter().all(|&n| n <= SYMBOLIZE_MAX_ADDRS && n % 254 == 0), "{sizes:?}");
        assert_eq!(frames.len(), 600);
        assert!(frames.iter().all(|f| f.len() == 254 && f.iter().all(Frame::is_known)));
    }

    #[test]
    fn a_short_answer_or_no_host_leaves_addresses_unknown() {
        testing::set_symbolizer(|reqs: &[StackRequest]| vec![vec![named(reqs[0].addrs[0])]]);
        let frames = symbolize(&[Stack::new(1, &[0xffff_0010, 0xffff_0020], &[0x1010])]);
        let shown: Vec<String> = frames[0].iter().map(|f| f.to_string()).collect();
        assert_eq!(shown, ["fffff001+0", "0xffff0020", "0x1010"]);
        assert!(!frames[0][1].is_known());

        testing::set_symbolizer(|_: &[StackRequest]| Vec::new());
        assert_eq!(symbolize(&[Stack::new(1, &[], &[0x20])]), [vec![Frame::unknown(0x20)]]);
    }

    #[test]
    fn empty_stacks_need_no_host_call() {
        let calls = fake_host();
        assert_eq!(symbolize(&[Stack::new(1, &[], &[])]), [Vec::<Frame>::new()]);
        assert_eq!(symbolize::<Stack>(&[]), Vec::<Vec<Frame>>::new());
        assert!(RefCell::borrow(&calls).is_empty());
    }

    #[test]
    fn stacks_render_like_bpftrace_and_folded_like_flamegraph() {
        let frames = [
            named(0xffff_0013),
            named(0xffff_0025),
            named(0x1031),
            Frame::unknown(0x7f00),
            Frame { module: "/usr/lib/libc.so.6".into(), ..Frame::unknown(0x7f10) },
        ];
        assert_eq!(
            render_stack(&frames),
            "\n        fffff001+3\n        fffff002+5\n        f103+1\n        0x7f00\n        0x7f10\n"
        );
        assert_eq!(render_folded(&frames), "[libc.so.6];0x7f00;f103;fffff002;fffff001");
        assert_eq!(StackStyle::default().render(&[]), "\n");
        let odd = Frame { symbol: "a;b\nc".into(), ..Frame::unknown(1) };
        assert_eq!(StackStyle::Folded.render(&[odd]), "a:b c");
    }

    #[test]
    fn stacks_are_keys_that_cap_their_depth() {
        let deep: Vec<u64> = (0..300).collect();
        let s = Stack::new(3, &deep, &deep);
        assert_eq!((s.kernel().len(), s.user().len()), (MAX_FRAMES, MAX_FRAMES));
        assert_eq!(s.kernel()[0], 0, "the innermost frames are kept");
        let key = Stack::new(3, &[0xa, 0xb], &[0x1]);
        assert_eq!(key.to_values(), vec![Value::Text("0x1;0xb;0xa".into())]);
        assert_eq!(format!("{key:?}"), "Stack { pid: 3, kernel: [0xa, 0xb], user: [0x1] }");
        assert!(Stack::new(0, &[], &[]).is_empty());
        assert_ne!(Stack::new(1, &[1], &[]), Stack::new(1, &[], &[1]), "kernel and user frames differ");
    }

    #[test]
    fn stack_aggregations_symbolize_only_the_top_and_merge_equal_frames() {
        let calls = fake_host();
        let mut counts = Counts::new();
        counts.add(Stack::new(1, &[], &[0x1010]), 5);
        counts.add(Stack::new(2, &[], &[0x1010]), 4); // the same program in another process
        counts.add(Stack::new(0, &[0xffff_0044], &[]), 3);
        counts.add(Stack::new(0, &[0xffff_0055], &[]), 1);

        let agg = counts.to_stack_aggregation("stacks", "", AggOrder::ValueAscending, 3);
        assert_eq!(RefCell::borrow(&calls).len(), 1);
        assert_eq!(RefCell::borrow(&calls)[0].len(), 3, "the smallest stack is not symbolized");
        let got: Vec<_> = agg.entries.iter().map(|e| (e.key.clone(), e.value.clone())).collect();
        let stack = |addr| vec![Value::Stack(vec![named(addr)])];
        assert_eq!(got, [(stack(0xffff_0044), AggValue::Scalar(3)), (stack(0x1010), AggValue::Scalar(9))]);
        assert_eq!((agg.key_names, agg.kind, agg.top), (vec!["stack".to_string()], AggKind::Count, 3));

        let agg = counts.to_stack_aggregation("all", "", AggOrder::ValueDescending, 0);
        assert_eq!(agg.entries.len(), 3);
        assert_eq!(RefCell::borrow(&calls).len(), 2);
    }

    #[test]
    fn any_aggregation_keyed_by_stack_merges_the_statistics_of_equal_frames() {
        let calls = fake_host();
        let mut latency = Agg::quantize();
        latency.add(Stack::new(1, &[], &[0x1010]), 3);
        latency.add(Stack::new(2, &[], &[0x1010]), 700);
        latency.add(Stack::new(2, &[0xffff_0020], &[]), 5);
        let agg = latency.to_stack_aggregation("latency", "", AggOrder::ValueAscending, 0);
        assert_eq!((agg.kind, agg.entries.len(), RefCell::borrow(&calls).len()), (AggKind::Quantize, 2, 1));
        let merged = &agg.entries[1];
        assert_eq!(merged.key, [Value::Stack(vec![named(0x1010)])]);
        let AggValue::Histogram(hist) = &merged.value else { panic!("{merged:?}") };
        assert_eq!((hist.buckets.len(), hist.sum), (9, 703), "buckets 2..4 to 512..1024, the samples of both");

        let mut max = Agg::max();
        max.add(Stack::new(1, &[], &[0x1010]), 3);
        max.add(Stack::new(2, &[], &[0x1010]), 700);
        let agg = max.to_stack_aggregation("max", "", AggOrder::Key, 1);
        assert_eq!(agg.entries.len(), 1);
        assert_eq!(agg.entries[0].value, AggValue::Scalar(700));
    }
}
