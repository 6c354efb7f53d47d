// Counts and histograms in the plugin, and a tracepoint field by name: the JavaScript
// twin of py-tally (tests/python-fixtures/py-tally/plugin.py says what it counts).
import * as wt from "wasmtap";

export const { info, start, onBatch, onTick, finish } = wt.plugin({
  name: "js-tally",
  description: "counts and histograms in the plugin",
  params: [wt.param("switches", "boolean", "false", "count sched_switch by next_comm instead of opens")],

  start(params, plan) {
    this.switches = params.switches;
    this.errors = new wt.Count();
    this.fds = new wt.Hist();
    this.next = new wt.Count();
    plan.subscribe(this.switches ? "tracepoint:sched:sched_switch" : "file:open");
  },

  onEvent(ev) {
    if (ev instanceof wt.Open) {
      this.errors.add(ev.errno ?? "-");
      this.fds.add(ev.comm, ev.ret);
    } else if (ev instanceof wt.Tracepoint) {
      this.next.add(wt.field(ev, "next_comm"));
    }
  },

  finish() {
    if (!this.switches) {
      return [this.errors.report("errors", { keys: ["errno"] }), this.fds.report("fds", { keys: ["comm"] })];
    }
    return [this.next.report("next", { keys: ["comm"] })];
  },
});
