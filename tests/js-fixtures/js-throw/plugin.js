// Hostile: throws an exception nobody catches in its first batch.
import { hostile } from "./hostile.js";

export const { info, start, onBatch, onTick, finish } = hostile("js-throw", "throws in onBatch", () => {
  throw new RangeError("a batch the plugin cannot take");
});
