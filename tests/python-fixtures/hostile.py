"""What the hostile Python fixtures share: a plugin that subscribes to getppid's entries
and does its harm in `on_batch`, with the name and description it is given."""

import wasmtap as wt


def hostile(name, description, harm):
    class Hostile(wt.Plugin):
        def start(self, params, plan):
            plan.subscribe("syscall:getppid:entry")

        def on_batch(self, batch):
            harm()

    Hostile.name, Hostile.description = name, description
    return wt.world(Hostile)
