// Hostile: loops forever in its first batch.
import { hostile } from "./hostile.js";

export const { info, start, onBatch, onTick, finish } = hostile("js-spin", "loops forever in onBatch", () => {
  for (let n = 0; ; n++);
});
