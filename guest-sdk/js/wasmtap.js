// wasmtap's SDK for plugins in JavaScript: the shape of the Rust SDK, in JavaScript's idiom.
//
// A plugin is an object; `plugin` makes it the component's exports:
//
//     import * as wt from "wasmtap";
//
//     export const { info, start, onBatch, onTick, finish } = wt.plugin({
//       name: "js-opens", version: "0.1.0", description: "Which files are opened, and by whom?",
//       params: [wt.param("failed", "boolean", "false", "only opens that failed")],
//       start(params, plan) {
//         this.failed = params.failed;
//         plan.subscribe("file:open");
//         this.opens = plan.table("opens", [["PID", wt.INT, 7], ["PATH", wt.TEXT, 0]]);
//       },
//       onEvent(ev) {
//         if (ev instanceof wt.Open && (ev.ret < 0 || !this.failed)) wt.row(this.opens, ev.pid, ev.fullPath);
//       },
//     });
//
// Rows made during a call are sent to the host together when the call returns, packed:
// one crossing of the boundary per batch, not per row. Build with
// `wasmtap plugin build DIR` (docs/languages.md); `import ... from "wasmtap"` is this SDK.

import { readAggregation } from "wasmtap:plugin/kernel-aggregations@0.2.0";
import { emitPacked, print } from "wasmtap:plugin/output@0.2.0";
import { schema as askSchema } from "wasmtap:plugin/probes@0.2.0";
import { exit as askExit, log as hostLog, monotonicNs, symbolize as askSymbolize } from "wasmtap:plugin/services@0.2.0";
import { forEachEvent, syscallName, utf8 } from "./events.js";

export * from "./events.js";
export { monotonicNs };

// Column kinds, aggregation kinds and orders, as the contract names them.
export const INT = "integer", TEXT = "text", TIMESTAMP = "timestamp";
export const COUNT = "count", SUM = "sum", MIN = "min", MAX = "max", AVG = "avg", QUANTIZE = "quantize", LQUANTIZE = "lquantize";
export const ASCENDING = "value-ascending", DESCENDING = "value-descending", BY_KEY = "key";

/** Thrown by `start`: the run does not begin, and the user reads the message. */
export class Refuse extends Error {}

/** A parameter the plugin takes (`--param NAME=VALUE`): kind integer, boolean, text or duration. */
export function param(name, kind, defaultValue, description) {
  return { name, kind, defaultValue: defaultValue === null ? undefined : String(defaultValue), description };
}

/** A parameter's value, validated and normalized by the host: a Number (durations in ns), a boolean, or text. */
function typed(kind, text) {
  if (kind === "integer" || kind === "duration") return Number(text);
  if (kind === "boolean") return text === "true";
  return text;
}

const OPS = { "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "&": "mask-any", "!&": "mask-none" };

function filter({ syscalls = [], uids = [], comms = [], pids = [], cgroups = [], predicates = [] } = {}) {
  const preds = predicates.map(([field, op, value]) => ({ field, op: OPS[op], value: Number(value) }));
  return { syscalls, uids, comms, pids, cgroups, predicates: preds };
}

/** A kernel aggregation's key or value: comm, pid, tid, uid, cgroup, syscall, latency, or a field by name. */
function source(key) {
  return ["comm", "pid", "tid", "uid", "cgroup", "syscall", "latency"].includes(key) ? { tag: key } : { tag: "field", val: key };
}

function kernelFunction(fn) {
  if (Array.isArray(fn) && fn[0] === "lhist") return { tag: "linear-histogram", val: { min: fn[1], max: fn[2], step: fn[3] } };
  return { tag: { count: "count", sum: "sum", min: "min", max: "max", hist: "log2-histogram" }[fn] };
}

function correlation(key) {
  if (key === "tid") return { tag: "tid" };
  if (key.startsWith("task:")) return { tag: "task", val: key.slice(5) };
  return { tag: "field", val: key };
}

/** What the plugin asks for, filled in `start`: subscriptions, tables, kernel aggregations. */
export class Plan {
  constructor() {
    this.subscriptions = [];
    this.tables = [];
    this.aggregations = [];
  }

  /** Subscribe to `probe` (`file:open`, `syscall:read:exit`...), filtered in the kernel by
   * `{syscalls, uids, comms, pids, cgroups, predicates: [["ret", "<", 0]]}`, with `stacks`
   * "", "kernel", "user" or "kernel,user". Returns the subscription's index (`ev.sub`). */
  subscribe(probe, { stacks = "", optional = false, ...f } = {}) {
    const parts = stacks.split(",").map((s) => s.trim());
    this.subscriptions.push({ probe, filter: filter(f), stacks: { kernel: parts.includes("kernel"), user: parts.includes("user") }, optional });
    return this.subscriptions.length - 1;
  }

  /** A table of rows: `columns` as [name, INT | TEXT | TIMESTAMP, width]. Returns its id for `row`. */
  table(name, columns) {
    this.tables.push({ name, columns: columns.map(([n, kind, width]) => ({ name: n, kind, width })) });
    return this.tables.length - 1;
  }

  /** An aggregation the kernel computes (no event leaves it): `fn` count, sum, min, max, hist or
   * ["lhist", MIN, MAX, STEP] of `value` (a field, or with `start`, the probe that starts the
   * interval, its latency), keyed by up to four of comm, pid, tid, uid, cgroup, syscall or a
   * field. Returns its id for `fromKernel`. */
  kernelAgg(name, probe, { fn = "count", keys = [], value = null, start = null, startKey = "tid", endKey = "tid", ...f } = {}) {
    let startEvent;
    if (start !== null) {
      startEvent = { probe: start, filter: filter(), key: correlation(startKey), endKey: correlation(endKey), more: [] };
      value = "latency";
    }
    this.aggregations.push({
      name, probe, filter: filter(f), keys: keys.map(source), function: kernelFunction(fn),
      value: value === null ? { tag: "comm" } : source(value), start: startEvent,
    });
    return this.aggregations.length - 1;
  }

  /** `kernelAgg` with count: events of `probe` by key, counted in the kernel. */
  kernelCount(name, probe, keys = [], f = {}) {
    return this.kernelAgg(name, probe, { fn: "count", keys, ...f });
  }
}

// Rows of the current call, packed as `output.emit-packed` reads them.
let pending = new Uint8Array(4096);
let pendingLen = 0;

function room(n) {
  if (pendingLen + n <= pending.length) return;
  let size = pending.length * 2;
  while (size < pendingLen + n) size *= 2;
  const grown = new Uint8Array(size);
  grown.set(pending.subarray(0, pendingLen));
  pending = grown;
}

/** Append a row to `table` (an id from `plan.table`): Numbers, BigInts and text, one per column. */
export function row(table, ...values) {
  room(6);
  let v = new DataView(pending.buffer);
  v.setUint32(pendingLen, table, true);
  v.setUint16(pendingLen + 4, values.length, true);
  pendingLen += 6;
  for (const x of values) {
    if (typeof x === "number" || typeof x === "bigint") {
      room(9);
      v = new DataView(pending.buffer);
      v.setUint8(pendingLen, 0);
      if (typeof x === "number" && Number.isSafeInteger(x)) {
        // Two halves, two's complement: BigInts are slow in QuickJS.
        const hi = Math.floor(x / 4294967296);
        v.setUint32(pendingLen + 1, x - hi * 4294967296, true);
        v.setInt32(pendingLen + 5, hi, true);
      } else {
        v.setBigInt64(pendingLen + 1, BigInt.asIntN(64, BigInt(typeof x === "number" ? Math.trunc(x) : x)), true);
      }
      pendingLen += 9;
    } else {
      const t = String(x);
      room(5 + 3 * t.length);
      const n = utf8.encodeInto(t, pending, pendingLen + 5);
      v = new DataView(pending.buffer);
      v.setUint8(pendingLen, 1);
      v.setUint32(pendingLen + 1, n, true);
      pendingLen += 5 + n;
    }
  }
}

function flush() {
  if (pendingLen) {
    emitPacked(pending.slice(0, pendingLen));
    pendingLen = 0;
  }
}

/** Print text on the run's output (a newline is not added). */
export function echo(text) {
  print(text);
}

/** A diagnostic on stderr, with the plugin's name: level debug, info, warn or error. */
export function log(msg, level = "info") {
  hostLog(level, msg);
}

/** End the run as Ctrl-C would, once this call returns. */
export function exit() {
  askExit();
}

const schemas = new Map();

/** The fields of subscription `sub`'s records (tracepoints), by name, asked of the host once. */
export function schema(sub) {
  if (!schemas.has(sub)) {
    const s = askSchema(sub);
    schemas.set(sub, new Map((s ? s.fields : []).map((f) => [f.name, f])));
  }
  return schemas.get(sub);
}

/** Field `name` of a tracepoint event, by its schema; null if it has none. */
export function field(ev, name) {
  const f = schema(ev.sub).get(name);
  return f ? ev.field(f) : null;
}

/** Frames for the addresses of one stack (user of `pid`, or kernel). */
export function symbolize(pid, addrs, kernel = false) {
  return askSymbolize([{ pid, kernel, addrs: addrs.map((a) => Number(a)) }])[0];
}

const value = (v) => (typeof v === "number" || typeof v === "bigint" ? { tag: "int", val: Number(v) } : { tag: "text", val: String(v) });
const key = (k) => (Array.isArray(k) ? k : [k]).map(value);

/** An aggregation to return from `onTick` or `finish`: `entries` as [key, value] pairs, a key
 * one value or an array; a value a Number, or for QUANTIZE/LQUANTIZE [[low, high, count]...] and a sum. */
export function aggregation(name, kind, entries, { title = "", keys = ["key"], order = ASCENDING, top = 0 } = {}) {
  const out = [];
  for (const [k, v] of entries) {
    const val = typeof v === "number" ? { tag: "scalar", val: v }
      : { tag: "histogram", val: { buckets: v[0].map(([low, high, count]) => ({ low, high, count })), sum: v[1] } };
    out.push({ key: key(k), value: val });
  }
  return { name, title, keyNames: keys, kind, order, top, entries: out };
}

/** Counts by key: `c.add(key)`; `c.report("name")` is the aggregation. Keys are Numbers, text or arrays of them. */
export class Count {
  constructor() {
    this.counts = new Map();
  }
  add(k, n = 1) {
    const id = JSON.stringify(k);
    const e = this.counts.get(id);
    if (e) e[1] += n;
    else this.counts.set(id, [k, n]);
  }
  report(name, opts = {}) {
    return aggregation(name, COUNT, this.counts.values(), opts);
  }
}

/** The power-of-two bucket of `v`, as DTrace's quantize and the host number it. */
export function log2Bucket(v) {
  const a = Math.abs(v);
  const bits = a === 0 ? 0 : Math.floor(Math.log2(a)) + 1;
  return v < 0 ? -bits : bits;
}

/** The values [low, high) of bucket `b` (exact below 2^53). */
export function log2Range(b) {
  b = Math.max(-64, Math.min(63, b));
  if (b === 0) return [0, 1];
  if (b === 63) return [2 ** 62, Number.MAX_SAFE_INTEGER];
  if (b > 0) return [2 ** (b - 1), 2 ** b];
  if (b === -64) return [Number.MIN_SAFE_INTEGER, Number.MIN_SAFE_INTEGER + 1];
  return [-(2 ** -b) + 1, -(2 ** (-b - 1)) + 1];
}

/** Power-of-two histograms by key (bpftrace's `hist`): `h.add(key, value)`. */
export class Hist {
  constructor() {
    this.hists = new Map();
  }
  add(k, v) {
    const id = JSON.stringify(k);
    let e = this.hists.get(id);
    if (!e) this.hists.set(id, (e = [k, new Map(), 0]));
    const b = log2Bucket(v);
    e[1].set(b, (e[1].get(b) ?? 0) + 1);
    e[2] += v;
  }
  report(name, opts = {}) {
    const entries = [...this.hists.values()].map(([k, buckets, sum]) => [
      k, [[...buckets.entries()].sort((x, y) => x[0] - y[0]).map(([b, n]) => [...log2Range(b), n]), sum],
    ]);
    return aggregation(name, QUANTIZE, entries, opts);
  }
}

/** Kernel aggregation `id`, read now, as an aggregation to return; a `syscall` key part shows the syscall's name. */
export function fromKernel(id, name, { kind = COUNT, title = "", keys = ["key"], order = ASCENDING, top = 0, reset = false } = {}) {
  let entries = [];
  try {
    entries = readAggregation(id, reset);
  } catch (e) {
    log(`kernel aggregation ${name}: ${e && e.payload !== undefined ? e.payload : e}`, "warn");
  }
  keys.forEach((k, i) => {
    if (k !== "syscall") return;
    for (const e of entries) {
      const part = e.key[i];
      const n = part && part.tag === "int" ? syscallName(Number(part.val)) : null;
      if (n !== null) e.key[i] = { tag: "text", val: n };
    }
  });
  return { name, title, keyNames: keys, kind, order, top, entries };
}

/** Run a plugin method; an exception is logged with where it was raised, then faults the call. */
function guard(what, call) {
  try {
    return call();
  } catch (e) {
    if (e instanceof Refuse) throw e;
    const where = e && e.stack ? "\n" + String(e.stack).trimEnd() : "";
    log(`${what} raised ${e && e.name ? e.name : typeof e}: ${e && e.message !== undefined ? e.message : e}${where}`, "error");
    throw e;
  }
}

/** The component's exports around `p`, an object with name, version, description, params, and
 * the methods it needs of start(params, plan), onBatch(batch), onEvent(ev), onTick(sub, nowNs),
 * finish(); `this` is `p` in each. */
export function plugin(p) {
  const params = p.params ?? [];
  return {
    info() {
      return { name: p.name, version: p.version ?? "0.1.0", description: p.description ?? "", params };
    },
    start(given) {
      const values = {};
      for (const spec of params) {
        const text = given.find((g) => g.name === spec.name)?.value ?? spec.defaultValue;
        values[spec.name] = text === undefined ? undefined : typed(spec.kind, text);
      }
      const plan = new Plan();
      try {
        if (p.start) guard("start", () => p.start(values, plan));
      } catch (e) {
        if (e instanceof Refuse) throw e.message;
        throw e;
      } finally {
        flush();
      }
      return plan;
    },
    onBatch(batch) {
      try {
        guard("onBatch", () => {
          if (p.onBatch) return p.onBatch(batch);
          if (!p.onEvent) return;
          forEachEvent(batch, (ev) => p.onEvent(ev));
        });
      } finally {
        flush();
      }
    },
    onTick(sub, nowNs) {
      try {
        return guard("onTick", () => (p.onTick ? p.onTick(sub, nowNs) : [])) ?? [];
      } finally {
        flush();
      }
    },
    finish() {
      try {
        return guard("finish", () => (p.finish ? p.finish() : [])) ?? [];
      } finally {
        flush();
      }
    },
  };
}
