// js-opensnoop: which files are being opened, by whom, with which flags, and what comes
// back? One row per completed open, openat, openat2 or creat, streamed: the JavaScript
// take on opensnoop (plugins/opensnoop), with the JavaScript SDK (guest-sdk/js;
// docs/languages.md).
//
//     wasmtap plugin build examples/js-opensnoop
//     wasmtap run examples/js-opensnoop/target/wasmtap/js-opensnoop.wasm [-c CMD] [--param failed=true]

import * as wt from "wasmtap";

export const { info, start, onBatch, onTick, finish } = wt.plugin({
  name: "js-opensnoop",
  version: "0.1.0",
  description: "Which files are being opened, by whom, with which flags, and what comes back?",
  params: [wt.param("failed", "boolean", "false", "only opens that failed")],

  start(params, plan) {
    this.onlyFailed = params.failed;
    plan.subscribe("file:open");
    this.opens = plan.table("opens", [
      ["TIME", wt.TIMESTAMP, 12], ["PID", wt.INT, 7], ["COMM", wt.TEXT, 16], ["FD", wt.INT, 3],
      ["ERR", wt.TEXT, 7], ["FLAGS", wt.TEXT, 26], ["PATH", wt.TEXT, 0],
    ]);
  },

  onEvent(ev) {
    if (!(ev instanceof wt.Open)) return;
    const ret = ev.ret;
    if (this.onlyFailed && ret >= 0) return;
    const err = ret >= 0 ? "-" : (wt.errnoName(ret) ?? String(ret));
    wt.row(this.opens, ev.tsNs, ev.pid, ev.comm, ret >= 0 ? ret : -1, err, ev.flagsStr, ev.fullPath);
  },
});
