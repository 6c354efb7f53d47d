//! What a plugin shows: its rows, texts and logs written out, its aggregation reports
//! rendered (charged to it), and its accounting.

use super::*;

impl Runner {
    /// Render a report of aggregations, charging the host's time and the bytes written
    /// to the plugin. A tick's report is skipped while the plugin is over its output
    /// budget; the final report is always rendered.
    pub(super) fn report(&mut self, aggs: &[types::Aggregation], out: &mut Output, clock: &Clock, last: bool) {
        if aggs.is_empty() {
            return;
        }
        let work = HostWork::begin(out);
        // The metrics take every report: the plugin has cleared what it reported.
        if let Some(feed) = &self.export {
            feed.sink.add(feed.slot, aggs);
        }
        let print = last || self.export.as_ref().is_none_or(|f| f.print_ticks);
        let over_budget = self.budget.enforced && self.budget.output_bytes >= self.limits.output_bytes_per_sec;
        match &self.export {
            _ if !print => {}
            _ if !last && over_budget => self.stats.ticks_skipped += 1,
            Some(feed) if last && !feed.print_ticks => {
                out.aggregations(&self.info.name, &feed.sink.totals(feed.slot, aggs));
            }
            _ => out.aggregations(&self.info.name, aggs),
        }
        let (cpu_ns, bytes) = work.end(out);
        self.host_cpu_ns += cpu_ns;
        self.budget.output_bytes += bytes;
        // A report is host work done for one call: bounded by the call's deadline, like
        // the call. (The final report is the one the user waits for: it is only charged.)
        if !last && Duration::from_nanos(cpu_ns) > self.limits.deadline {
            let entries: usize = aggs.iter().map(|a| a.entries.len()).sum();
            let fault = Fault {
                callback: "on-tick",
                kind: FaultKind::Output,
                reason: format!(
                    "its report of {entries} aggregation entries took the host {} ms of CPU to render, more than its deadline of {} ms",
                    cpu_ns / 1_000_000,
                    self.limits.deadline.as_millis()
                ),
                backtrace: None,
                elapsed: Duration::from_nanos(cpu_ns),
            };
            return self.fault(fault, out, clock);
        }
        self.charge(out);
    }

    /// Write what the last call produced. The budget is charged what the plugin handed
    /// over, or what the host wrote for it where that is more (padding, escapes), and
    /// the host's CPU time.
    pub(super) fn render(&mut self, out: &mut Output, clock: &Clock) {
        let Some(inst) = self.instance.as_mut() else { return };
        let output = inst.take_output();
        self.exit_asked |= output.exit;
        self.stats.output_dropped += output.dropped_items;
        self.stats.output_dropped_bytes += output.dropped_bytes;
        let work = HostWork::begin(out);
        self.write_items(output.items, out, clock);
        let (cpu_ns, written) = work.end(out);
        self.host_cpu_ns += cpu_ns;
        self.budget.output_bytes += output.bytes.max(written) + output.dropped_bytes;
    }

    pub(super) fn write_items(&self, items: Vec<GuestItem>, out: &mut Output, clock: &Clock) {
        let (name, tables) = (&self.info.name, &self.plan.tables);
        // A row into its table, or a note that it does not fit one.
        let put = |out: &mut Output, table: u32, cells: &[Cell<'_>]| match tables.get(table as usize) {
            Some(t) if t.columns.len() == cells.len() => out.row(name, t, cells, clock),
            _ => out.diag(&format!("{name}: dropped a row that does not fit table {table}")),
        };
        for item in items {
            match item {
                GuestItem::Rows(rows) => {
                    for row in &rows {
                        let cells: Vec<Cell<'_>> = row.values.iter().map(Cell::from).collect();
                        put(out, row.table, &cells);
                    }
                }
                GuestItem::Packed(bytes) => {
                    let mut rows = crate::sandbox::packed::Rows::new(&bytes);
                    let mut cells = Vec::new();
                    // Checked whole when it was emitted.
                    while let Ok(Some(table)) = rows.next_into(&mut cells) {
                        put(out, table, &cells);
                    }
                }
                GuestItem::Text(s) => out.text(name, &s),
                GuestItem::Log(l) => out.log(name, l.level, &l.message),
            }
        }
    }

    /// This plugin's accounting, with its per-probe counts; the kernel's per-probe
    /// counters go to the first subscription that covers each row.
    pub fn stats(&self, kernel: &KernelCounters, table: &ProbeTable) -> PluginStats {
        let mut stats = self.stats.clone();
        stats.probes = self.sub_stats.clone();
        for (row, k) in &kernel.probes {
            let Some(i) = self.subs[..self.own_subs].iter().position(|s| s.covers(*row, table)) else { continue };
            let p = &mut stats.probes[i];
            // Saturating: the counters may come from a recording.
            p.kernel_filtered = p.kernel_filtered.saturating_add(k.filtered);
            p.ring_dropped = p.ring_dropped.saturating_add(k.dropped);
            p.kernel_lost = p.kernel_lost.saturating_add(k.lost);
            p.emitted = p.emitted.saturating_add(k.emitted);
            p.generated = p.generated.saturating_add(k.generated());
        }
        stats.aggregation_losses = self.aggregation_losses(kernel);
        let sum = |f: fn(&ProbeStats) -> u64| self.sub_stats.iter().map(f).sum::<u64>();
        stats.filtered = sum(|s| s.filtered);
        stats.delivered = sum(|s| s.delivered);
        stats.dropped_budget = sum(|s| s.dropped_budget);
        stats.dropped_fault = sum(|s| s.dropped_fault);
        stats.dropped = stats.dropped_budget + stats.dropped_fault;
        let scope = self.scope.lock().unwrap_or_else(|e| e.into_inner());
        (stats.symbolize_refused, stats.symbolize_scope_forgotten) = (scope.refused, scope.forgotten);
        drop(scope);
        let meter = self.instance.as_ref().map(Instance::meter).unwrap_or_default();
        stats.cpu_ms = (self.cpu_base_ns + meter.cpu_ns) / 1_000_000;
        stats.host_cpu_ms = self.host_cpu_ns / 1_000_000;
        stats.longest_call_ms = stats.longest_call_ms.max(meter.longest.as_millis() as u64);
        stats
    }

    /// The losses of this plugin's kernel aggregations, named as its plan names them.
    pub(super) fn aggregation_losses(&self, kernel: &KernelCounters) -> Vec<AggregationLosses> {
        let named = self.agg_ids.iter().zip(&self.plan.aggregations);
        named
            .filter_map(|(id, a)| {
                kernel.agg_losses.get(id).map(|l| AggregationLosses { aggregation: a.name.clone(), lost: *l })
            })
            .collect()
    }
}
