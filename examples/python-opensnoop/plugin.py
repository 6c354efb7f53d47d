"""python-opensnoop: which files are being opened, by whom, with which flags, and what
comes back? One row per completed open, openat, openat2 or creat, streamed: the Python
take on opensnoop (plugins/opensnoop), with the Python SDK (guest-sdk/python;
docs/languages.md).

    wasmtap plugin build examples/python-opensnoop
    wasmtap run examples/python-opensnoop/target/wasmtap/python-opensnoop.wasm [-c CMD] [--param failed=true]
"""

import wasmtap as wt


class Opensnoop(wt.Plugin):
    name = "python-opensnoop"
    version = "0.1.0"
    description = "Which files are being opened, by whom, with which flags, and what comes back?"
    params = [wt.Param("failed", wt.BOOLEAN, "false", "only opens that failed")]

    def start(self, params, plan):
        self.only_failed = params["failed"]
        plan.subscribe("file:open")
        self.opens = plan.table("opens", [
            ("TIME", wt.TIMESTAMP, 12), ("PID", wt.INT, 7), ("COMM", wt.TEXT, 16), ("FD", wt.INT, 3),
            ("ERR", wt.TEXT, 7), ("FLAGS", wt.TEXT, 26), ("PATH", wt.TEXT, 0),
        ])

    def on_event(self, ev):
        if type(ev) is not wt.Open:
            return
        ret = ev.ret
        if self.only_failed and ret >= 0:
            return
        err = "-" if ret >= 0 else (wt.errno_name(ret) or str(ret))
        wt.row(self.opens, ev.ts_ns, ev.pid, ev.comm, ret if ret >= 0 else -1, err, ev.flags_str, ev.full_path)


WitWorld = wt.world(Opensnoop)
