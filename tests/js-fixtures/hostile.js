// What the hostile JavaScript fixtures share: a plugin that subscribes to getppid's
// entries and does its harm in onBatch, with the name and description it is given.

import * as wt from "wasmtap";

export function hostile(name, description, harm) {
  return wt.plugin({
    name,
    description,
    start(params, plan) {
      plan.subscribe("syscall:getppid:entry");
    },
    onBatch() {
      harm();
    },
  });
}
