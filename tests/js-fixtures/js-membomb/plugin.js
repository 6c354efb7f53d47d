// Hostile: allocates and touches memory without end in its first batch.
import { hostile } from "./hostile.js";

const hoard = [];
export const { info, start, onBatch, onTick, finish } = hostile("js-membomb", "allocates without bound in onBatch", () => {
  for (;;) hoard.push(new Uint8Array(1 << 20).fill(0x5a));
});
