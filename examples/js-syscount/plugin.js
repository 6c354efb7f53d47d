// js-syscount: which syscalls, and which processes make them? Counted in the kernel: no
// event leaves it. The JavaScript take on syscount (plugins/syscount), with the
// JavaScript SDK (guest-sdk/js; docs/languages.md).
//
//     wasmtap plugin build examples/js-syscount
//     wasmtap run examples/js-syscount/target/wasmtap/js-syscount.wasm [-c CMD] [--param top=N]

import * as wt from "wasmtap";

export const { info, start, onBatch, onTick, finish } = wt.plugin({
  name: "js-syscount",
  version: "0.1.0",
  description: "Which syscalls, and which processes make them? Counted in the kernel.",
  params: [wt.param("top", "integer", "10", "print the N busiest of each; 0: all")],

  start(params, plan) {
    this.top = params.top;
    if (this.top < 0) throw new wt.Refuse("top must be 0 or more");
    this.bySyscall = plan.kernelCount("syscall", "tracepoint:raw_syscalls:sys_enter", ["syscall"]);
    this.byProcess = plan.kernelCount("process", "tracepoint:raw_syscalls:sys_enter", ["comm"]);
  },

  finish() {
    return [
      wt.fromKernel(this.bySyscall, "syscall", { title: "Top syscalls:", keys: ["syscall"], top: this.top }),
      wt.fromKernel(this.byProcess, "process", { title: "Top processes:", keys: ["process"], top: this.top }),
    ];
  },
});
