"""Counts and histograms in the plugin, and a tracepoint field by name: opens by errno
(`errors`) and a histogram of the fds each command got (`fds`); with switches=true,
sched_switch by `next_comm` (`next`). The same in C and JavaScript
(c-tally, js-tally): the languages test holds the three to each other and to the Rust
plugins."""

import wasmtap as wt


class Tally(wt.Plugin):
    name = "py-tally"
    description = "counts and histograms in the plugin"
    params = [wt.Param("switches", wt.BOOLEAN, "false", "count sched_switch by next_comm instead of opens")]

    def start(self, params, plan):
        self.switches = params["switches"]
        self.errors, self.fds, self.next = wt.Count(), wt.Hist(), wt.Count()
        plan.subscribe("tracepoint:sched:sched_switch" if self.switches else "file:open")

    def on_event(self, ev):
        if isinstance(ev, wt.Open):
            self.errors.add(ev.errno or "-")
            self.fds.add(ev.comm, ev.ret)
        elif isinstance(ev, wt.Tracepoint):
            self.next.add(wt.field(ev, "next_comm"))

    def finish(self):
        if not self.switches:
            return [self.errors.report("errors", keys=["errno"]), self.fds.report("fds", keys=["comm"])]
        return [self.next.report("next", keys=["comm"])]


WitWorld = wt.world(Tally)
