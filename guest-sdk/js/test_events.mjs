// The JavaScript SDK's decoder against the table every SDK shares (guest-sdk/vectors.json,
// written by the Rust SDK): each record, each field, the same value.
//
//     node guest-sdk/js/test_events.mjs [VECTORS.json]
//
// Prints one line per record and exits 1 naming every field that differs. The table's
// keys are the Rust SDK's names (snake_case); the JavaScript SDK's are camelCase.

import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as w from "./events.js";

const KINDS = { sys_enter: w.SysEnter, sys_exit: w.SysExit, exec: w.Exec, fork: w.Fork, exit: w.Exit,
  tracepoint: w.Tracepoint, user: w.User, sample: w.Sample, open: w.Open };
const camel = (k) => k.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
const hex = (b) => Buffer.from(b).toString("hex");

// Integers past 2^53 are quoted before parsing, so that none is rounded; values compare
// as Numbers where exact and as decimal text beyond.
function parse(text) {
  return JSON.parse(text.replace(/([:\[,]\s*)(-?\d{16,})(?=\s*[,\]\}])/g, '$1"$2"'));
}
function norm(v) {
  if (typeof v === "bigint") return Number.isSafeInteger(Number(v)) ? Number(v) : v.toString();
  if (typeof v === "string" && /^-?\d{16,}$/.test(v)) return Number.isSafeInteger(Number(v)) ? Number(v) : v;
  if (v instanceof Uint8Array) return hex(v);
  if (Array.isArray(v)) return v.map(norm);
  if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, norm(v[k])]));
  return v === undefined ? null : v;
}

function decoded(ev, key, schema) {
  if (key === "kind") return Object.keys(KINDS).find((k) => ev.constructor === KINDS[k]);
  if (key === "data") return hex(ev.data);
  if (key === "fields") return Object.fromEntries(schema.map((f) => [f.name, ev.field(f)]));
  return ev[camel(key)];
}

const path = process.argv[2] ?? fileURLToPath(new URL("../vectors.json", import.meta.url));
const table = parse(readFileSync(path, "utf8"));
let bad = 0;
for (const c of table.records) {
  const record = new Uint8Array(Buffer.from(c.record, "hex"));
  const evs = [...w.events(record)];
  if (evs.length !== 1) {
    console.log(`FAIL ${c.name}: ${evs.length} events decoded, not 1`);
    bad++;
    continue;
  }
  const wrong = [];
  for (const [k, want] of Object.entries(c.expect)) {
    const got = norm(decoded(evs[0], k, c.schema));
    if (JSON.stringify(got) !== JSON.stringify(norm(want))) wrong.push([k, want, got]);
  }
  for (const [k, want, got] of wrong) {
    console.log(`FAIL ${c.name}: ${camel(k)} is ${JSON.stringify(got)}, the Rust SDK reads ${JSON.stringify(norm(want))}`);
  }
  bad += wrong.length;
  if (!wrong.length) console.log(`ok   ${c.name} (${Object.keys(c.expect).length} fields)`);
}
// A batch of every record back to back decodes to all of them; a cut one ends the batch.
const batch = new Uint8Array(Buffer.concat(table.records.map((c) => Buffer.from(c.record, "hex"))));
if ([...w.events(batch)].length !== table.records.length) {
  console.log("FAIL the whole table as one batch");
  bad++;
}
if ([...w.events(batch.subarray(0, batch.length - 8))].length !== table.records.length - 1) {
  console.log("FAIL a batch cut short: its last record is not dropped");
  bad++;
}
console.log(`${table.records.length} records, ${bad} mismatches`);
process.exit(bad ? 1 : 0);
