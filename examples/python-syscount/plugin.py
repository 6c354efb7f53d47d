"""python-syscount: which syscalls, and which processes make them? Counted in the kernel:
no event leaves it. The Python take on syscount (plugins/syscount), with the Python SDK
(guest-sdk/python; docs/languages.md).

    wasmtap plugin build examples/python-syscount
    wasmtap run examples/python-syscount/target/wasmtap/python-syscount.wasm [-c CMD] [--param top=N]
"""

import wasmtap as wt


class Syscount(wt.Plugin):
    name = "python-syscount"
    version = "0.1.0"
    description = "Which syscalls, and which processes make them? Counted in the kernel."
    params = [wt.Param("top", wt.INTEGER, 10, "print the N busiest of each; 0: all")]

    def start(self, params, plan):
        self.top = params["top"]
        if self.top < 0:
            raise wt.Refuse("top must be 0 or more")
        self.by_syscall = plan.kernel_count("syscall", "tracepoint:raw_syscalls:sys_enter", keys=["syscall"])
        self.by_process = plan.kernel_count("process", "tracepoint:raw_syscalls:sys_enter", keys=["comm"])

    def finish(self):
        return [
            wt.from_kernel(self.by_syscall, "syscall", title="Top syscalls:", keys=["syscall"], top=self.top),
            wt.from_kernel(self.by_process, "process", title="Top processes:", keys=["process"], top=self.top),
        ]


WitWorld = wt.world(Syscount)
