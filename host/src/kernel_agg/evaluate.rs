//! The collector's actions run in the host over records, for recordings and replays.

use super::*;

/// The same actions as the collector, run over records (recording and replay).
#[derive(Default)]
pub struct Evaluator {
    enter: Vec<Action>,
    exit: Vec<Action>,
    tracepoints: HashMap<u32, Vec<Action>>,
    task: TaskFilter,
    values: HashMap<(u32, RawKey), RawValue>,
    /// Keys held in each of the kernel's stores that can fill, as it would hold them:
    /// the general hash (`AGG_VALUES`) and the comm hash (`AGG_COMMS`).
    held: [usize; 2],
    /// Where each aggregation's values go, by id.
    slots: HashMap<u32, Slots>,
    starts: HashMap<(u32, u64), u64>,
    /// Starts kept with a task in the kernel (`Action::kept`): never full.
    task_starts: HashMap<(u32, u64), u64>,
    /// Events whose key did not fit (the map was full), as the kernel counts them.
    pub lost: u64,
    /// Starts that did not fit (the map of starts was full): intervals lost.
    pub starts_lost: u64,
}

impl Evaluator {
    pub fn new(specs: &[Spec], task: TaskFilter) -> Evaluator {
        let mut e = Evaluator { task, ..Evaluator::default() };
        for spec in specs {
            e.slots.insert(spec.id, spec.slots);
            for (site, a) in &spec.actions {
                match site {
                    SiteAttach::SysEnter => e.enter.push(a.clone()),
                    SiteAttach::SysExit => e.exit.push(a.clone()),
                    SiteAttach::Tracepoint { id, .. } => e.tracepoints.entry(*id).or_default().push(a.clone()),
                }
            }
        }
        e
    }

    /// Run the actions of the record's site.
    pub fn offer(&mut self, rec: &Record<'_>) {
        let (site, base, id) = match rec.kind() {
            Some(Kind::SysEnter) => (None, wasmtap_abi::sys_enter::ID, rec.i64_at(wasmtap_abi::sys_enter::ID)),
            Some(Kind::SysExit) => (None, wasmtap_abi::sys_exit::ID, rec.i64_at(wasmtap_abi::sys_exit::ID)),
            Some(Kind::Tracepoint) => match rec.u32_at(wasmtap_abi::tracepoint::EVENT_ID) {
                Some(tp) if self.tracepoints.contains_key(&tp) => (Some(tp), wasmtap_abi::tracepoint::DATA, None),
                _ => return,
            },
            _ => return,
        };
        let actions = match (site, rec.kind()) {
            (Some(tp), _) => self.tracepoints.get_mut(&tp).map(std::mem::take),
            (None, Some(Kind::SysEnter)) => Some(std::mem::take(&mut self.enter)),
            _ => Some(std::mem::take(&mut self.exit)),
        };
        let Some(actions) = actions else { return };
        if !actions.is_empty() && self.task.passes(rec) {
            for a in &actions {
                self.act(a, rec, base, id.unwrap_or(-1));
            }
        }
        match (site, rec.kind()) {
            (Some(tp), _) => {
                self.tracepoints.insert(tp, actions);
            }
            (None, Some(Kind::SysEnter)) => self.enter = actions,
            _ => self.exit = actions,
        }
    }

    fn read(rec: &Record<'_>, src: &Src, base: usize, id: i64) -> Option<u64> {
        Some(match src {
            Src::None | Src::Comm | Src::Latency => 0,
            Src::Pid => u64::from(rec.pid()),
            Src::Tid => u64::from(rec.tid()),
            Src::Uid => u64::from(rec.uid()),
            Src::Cgroup => rec.cgroup_id(),
            Src::Syscall => id as u64,
            Src::Field(loc) | Src::Task(loc) => {
                let raw = rec.bytes().get(base + loc.off as usize..base + loc.off as usize + loc.size as usize)?;
                let mut buf = [0u8; 8];
                buf[..raw.len()].copy_from_slice(raw);
                let v = u64::from_le_bytes(buf);
                let shift = 64 - 8 * u32::from(loc.size);
                if loc.signed && shift > 0 {
                    (((v << shift) as i64) >> shift) as u64
                } else {
                    v
                }
            }
        })
    }

    fn act(&mut self, a: &Action, rec: &Record<'_>, base: usize, id: i64) {
        if let Some(set) = &a.syscalls {
            if !u32::try_from(id).is_ok_and(|nr| set.contains(&nr)) {
                return;
            }
        }
        if !a.preds.iter().all(|p| p.holds(rec.bytes(), base)) {
            return;
        }
        let now = rec.ts_ns();
        let value = match a.role {
            Role::Start => {
                let Some(corr) = Self::read(rec, &a.corr, base, id) else { return };
                if a.kept != Kept::Map {
                    self.task_starts.insert((a.agg, corr), now);
                    return;
                }
                if self.starts.len() >= STARTS_MAX && !self.starts.contains_key(&(a.agg, corr)) {
                    self.starts_lost += 1;
                    return;
                }
                self.starts.insert((a.agg, corr), now);
                return;
            }
            Role::End => {
                let Some(corr) = Self::read(rec, &a.corr, base, id) else { return };
                let starts = if a.kept != Kept::Map { &mut self.task_starts } else { &mut self.starts };
                let Some(t0) = starts.remove(&(a.agg, corr)) else { return };
                now.wrapping_sub(t0) as i64
            }
            Role::Update if a.func == Func::Count => 0,
            Role::Update => match Self::read(rec, &a.value, base, id) {
                Some(v) => v as i64,
                None => return,
            },
        };
        let mut key = RawKey::default();
        for (i, src) in a.keys.iter().enumerate() {
            match src {
                Src::Comm => {
                    if let Some(c) = rec.slice(header::COMM, 16) {
                        key.comm.copy_from_slice(c);
                    }
                }
                s => match Self::read(rec, s, base, id) {
                    Some(v) => key.parts[i] = v,
                    None => return,
                },
            }
        }
        key.bucket = a.func.bucket(value);
        let store = self.store(a.agg, &key);
        let full = store.is_some_and(|s| self.held[s] >= [VALUES_MAX, COMMS_MAX][s] as usize);
        match self.values.get_mut(&(a.agg, key)) {
            Some(v) => v.add(value),
            None if full => self.lost += 1,
            None => {
                let mut v = RawValue::default();
                v.add(value);
                self.values.insert((a.agg, key), v);
                if let Some(s) = store {
                    self.held[s] += 1;
                }
            }
        }
    }

    /// Which of the kernel's stores that can fill holds `key` of aggregation `agg`: 0 the
    /// general hash, 1 the comm hash; none for a slot of the array, which never fills.
    fn store(&self, agg: u32, key: &RawKey) -> Option<usize> {
        match self.slots.get(&agg).copied().unwrap_or_default() {
            Slots::Comm => Some(1),
            s if agg < ARRAY_AGGS && s.slot(key).is_some() => None,
            _ => Some(0),
        }
    }

    pub(super) fn take(&mut self, agg: u32, reset: bool) -> Vec<(RawKey, RawValue)> {
        let keys: Vec<(u32, RawKey)> = self.values.keys().filter(|(a, _)| *a == agg).copied().collect();
        keys.into_iter()
            .filter_map(|k| {
                let v = if reset { self.values.remove(&k) } else { self.values.get(&k).copied() };
                if reset && v.is_some() {
                    if let Some(s) = self.store(k.0, &k.1) {
                        self.held[s] -= 1;
                    }
                }
                v.map(|v| (k.1, v))
            })
            .collect()
    }
}
