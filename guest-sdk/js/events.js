// The batch layout of docs/abi.md, decoded: wasmtap's events for JavaScript plugins.
//
// `events(batch)` walks a batch (a Uint8Array) and yields one object per record, without
// copying it: a DataView over the record, read only for the fields a plugin asks for.
// Every kind of the layout has its class (SysEnter, SysExit, Exec, Fork, Exit,
// Tracepoint, User, Sample, Open); all of them have the header's fields (tsNs, pid,
// tid, uid, gid, cgroupId, comm, sub, flags) and `stacks`.
//
// Numbers: counts, times, syscall numbers, return values and flags are Numbers (exact
// below 2^53, which they stay under); addresses and raw registers (syscall and probe
// arguments, instruction pointers, stack frames, 8-byte tracepoint fields) are BigInts.
//
// This module needs nothing of the host, so its tests run under Node: the table
// guest-sdk/vectors.json, written by the Rust SDK, is what every SDK must read alike
// (`node guest-sdk/js/test_events.mjs`).

import { ERRNOS, OPEN_FLAGS, SYSCALLS } from "./names.js";

export const HEADER_SIZE = 56;
export const SYS_ENTER = 1, SYS_EXIT = 2, EXEC = 3, FORK = 4, EXIT = 5, TRACEPOINT = 6, USER = 7, SAMPLE = 8, OPEN = 10;
const STACK_FLAG = 0x8000;
const MAX_FRAMES = 127;
// The least each kind's fixed part needs (exit: older recordings have 72).
const MIN_SIZE = { 1: 112, 2: 72, 3: 72, 4: 64, 5: 72, 6: 64, 7: 168, 8: 80, 10: 104 };

// UTF-8 by hand: QuickJS has no TextDecoder or TextEncoder.
const utf8 = {
  /** Bytes as text; an invalid sequence becomes U+FFFD, as Rust's `from_utf8_lossy` does. */
  decode(b) {
    let s = "";
    let ascii = 0;
    for (let i = 0; i < b.length; ) {
      const c = b[i];
      if (c < 0x80) {
        i++;
        continue;
      }
      if (ascii < i) s += String.fromCharCode.apply(null, b.subarray(ascii, i));
      const [cp, len] = decodeOne(b, i);
      s += cp < 0 ? "\ufffd" : String.fromCodePoint(cp);
      i += len;
      ascii = i;
    }
    if (ascii < b.length) s += String.fromCharCode.apply(null, b.subarray(ascii));
    return s;
  },
  /** Text as bytes. */
  encode(s) {
    const out = new Uint8Array(3 * s.length);
    return out.subarray(0, utf8.encodeInto(s, out, 0));
  },
  /** Text as UTF-8 into `out` from `at` (3 bytes a UTF-16 unit at most); returns the bytes written. */
  encodeInto(s, out, at) {
    const start = at;
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      if (c < 0x80) {
        out[at++] = c;
        continue;
      }
      if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d < 0xe000) {
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          i++;
          out[at++] = 0xf0 | (c >> 18);
          out[at++] = 0x80 | ((c >> 12) & 63);
          out[at++] = 0x80 | ((c >> 6) & 63);
          out[at++] = 0x80 | (c & 63);
          continue;
        }
      }
      if (c >= 0xd800 && c < 0xe000) c = 0xfffd; // a lone surrogate
      if (c < 0x800) {
        out[at++] = 0xc0 | (c >> 6);
      } else {
        out[at++] = 0xe0 | (c >> 12);
        out[at++] = 0x80 | ((c >> 6) & 63);
      }
      out[at++] = 0x80 | (c & 63);
    }
    return at - start;
  },
};

/** The code point at `b[i]` (not ASCII) and its length, or -1 and the length of the
 * invalid part to replace: the longest prefix of a valid sequence, at least one byte. */
function decodeOne(b, i) {
  const c = b[i];
  let need, cp, lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) [need, cp] = [1, c & 0x1f];
  else if (c >= 0xe0 && c <= 0xef) {
    [need, cp] = [2, c & 0x0f];
    if (c === 0xe0) lo = 0xa0;
    if (c === 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    [need, cp] = [3, c & 0x07];
    if (c === 0xf0) lo = 0x90;
    if (c === 0xf4) hi = 0x8f;
  } else return [-1, 1];
  for (let k = 1; k <= need; k++) {
    const x = b[i + k];
    if (x === undefined || x < lo || x > hi) return [-1, k];
    cp = (cp << 6) | (x & 0x3f);
    lo = 0x80;
    hi = 0xbf;
  }
  return [cp, need + 1];
}

export { utf8 };

/** The x86_64 syscall called `nr`, or null. */
export function syscallName(nr) {
  return nr >= 0 && nr < SYSCALLS.length && SYSCALLS[nr] ? SYSCALLS[nr] : null;
}

/** `ENOENT` for 2 (or -2), or null. */
export function errnoName(e) {
  return ERRNOS[Math.abs(e)] ?? null;
}

/** Open flags as `O_WRONLY|O_CREAT|O_TRUNC`: the access mode, each flag, unknown bits in
 * hex. `flags` a Number or a BigInt. */
export function openFlags(flags) {
  const f = BigInt(flags);
  return openFlagsParts(Number(f & 0xffffffffn), Number(f >> 32n));
}

/** The same from the low and high 32 bits (every flag's name is in the low ones). */
function openFlagsParts(lo, hi) {
  let rest = (lo & ~3) >>> 0;
  let out;
  if (lo & 0o10000000) {
    out = "O_PATH";
    rest = (rest & ~0o10000000) >>> 0;
  } else {
    out = ["O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"][lo & 3];
  }
  for (const [bits, name] of OPEN_FLAGS) {
    if ((rest & bits) >>> 0 === bits) {
      out += "|" + name;
      rest = (rest & ~bits) >>> 0;
    }
  }
  if (hi) out += "|0x" + hi.toString(16) + rest.toString(16).padStart(8, "0");
  else if (rest) out += "|0x" + rest.toString(16);
  return out;
}

/** Bytes up to the first NUL, as text (invalid UTF-8 replaced). */
function text(bytes) {
  const end = bytes.indexOf(0);
  return utf8.decode(end < 0 ? bytes : bytes.subarray(0, end));
}

const TWO32 = 4294967296;

export class Event {
  /** Record `size` bytes at `off` of `batch` (a Uint8Array), `view` a DataView over all of `batch`. */
  constructor(batch, view, off, kind, size) {
    this.batch = batch;
    this.view = view;
    this.off = off;
    this.kind = kind;
    this.size = size;
  }
  /** The record's bytes (a Uint8Array over the batch). */
  get bytes() { return this.batch.subarray(this.off, this.off + this.size); }
  u16(at) { return this.view.getUint16(this.off + at, true); }
  u32(at) { return this.view.getUint32(this.off + at, true); }
  i32(at) { return this.view.getInt32(this.off + at, true); }
  /** A 64-bit field as a Number (exact below 2^53), read as two halves: BigInts are slow in QuickJS. */
  u64(at) { return this.u32(at) + this.u32(at + 4) * TWO32; }
  i64(at) { return this.u32(at) + this.i32(at + 4) * TWO32; }
  /** A 64-bit field as a BigInt (addresses, registers). */
  big(at) { return this.view.getBigUint64(this.off + at, true); }
  get sub() { return this.u16(4); }
  get flags() { return this.u16(6); }
  get tsNs() { return this.u64(8); }
  get pid() { return this.u32(16); }
  get tid() { return this.u32(20); }
  get uid() { return this.u32(24); }
  get gid() { return this.u32(28); }
  get cgroupId() { return this.u64(32); }
  get comm() { return text(this.batch.subarray(this.off + 40, this.off + 56)); }

  /** {kernel, user} frames (BigInts), innermost first, or null if the record carries no stacks. */
  get stacks() {
    const t = this.trailer();
    if (t === null) return null;
    const [k, u] = t;
    const start = this.size - 8 - 8 * (k + u);
    const frames = [];
    for (let i = 0; i < k + u; i++) frames.push(this.big(start + 8 * i));
    return { kernel: frames.slice(0, k), user: frames.slice(k) };
  }

  /** [kernel, user] frame counts of a stack trailer that fits the record, or null. */
  trailer() {
    if (!(this.flags & STACK_FLAG) || ![TRACEPOINT, USER, SAMPLE].includes(this.kind)) return null;
    const k = this.u16(this.size - 8), u = this.u16(this.size - 6);
    if (k > MAX_FRAMES || u > MAX_FRAMES || this.size - 8 - 8 * (k + u) < MIN_SIZE[this.kind]) return null;
    return [k, u];
  }

  /** Where the kind's own bytes end: before the stack trailer, if any. */
  bodyEnd() {
    const t = this.trailer();
    return t === null ? this.size : this.size - 8 - 8 * (t[0] + t[1]);
  }
}

export class SysEnter extends Event {
  get nr() { return this.i64(56); }
  get name() { return syscallName(this.nr); }
  get args() { return [0, 1, 2, 3, 4, 5].map((i) => this.arg(i)); }
  arg(i) { return i >= 0 && i < 6 ? this.big(64 + 8 * i) : 0n; }
}

export class SysExit extends Event {
  get nr() { return this.i64(56); }
  get name() { return syscallName(this.nr); }
  get ret() { return this.i64(64); }
}

export class Exec extends Event {
  get ppid() { return this.u32(56); }
  get ret() { return this.i32(60); }
  get argc() { return this.u32(64); }
  get truncated() { return (this.flags & 1) !== 0; }
  /** The arguments, as many as `argc` says and the record holds. */
  get args() {
    const n = this.u32(68);
    if (n === 0) return [];
    let b = this.bytes.subarray(72, 72 + Math.min(n, this.size - 72));
    if (b.length && b[b.length - 1] === 0) b = b.subarray(0, b.length - 1);
    const out = [];
    let at = 0;
    while (out.length < this.argc) {
      const nul = b.indexOf(0, at);
      out.push(utf8.decode(b.subarray(at, nul < 0 ? b.length : nul)));
      if (nul < 0) break;
      at = nul + 1;
    }
    return out;
  }
}

export class Fork extends Event {
  get childPid() { return this.u32(56); }
  get childTid() { return this.u32(60); }
  get isThread() { return (this.flags & 1) !== 0; }
}

export class Exit extends Event {
  /** The wait status: `code << 8 | signal`. */
  get exitCode() { return this.i32(56); }
  get code() { return (this.exitCode >> 8) & 0xff; }
  get signal() { return this.exitCode & 0x7f; }
  get coreDumped() { return (this.exitCode & 0x80) !== 0; }
  get ppid() { return this.u32(60); }
  get startNs() { return this.u64(64); }
  /** The last thread of its process. */
  get groupDead() { return (this.flags & 1) !== 0; }
  /** CPU time of the process so far (null in recordings older than the field). */
  get cpuNs() { return this.size >= 96 ? this.u64(72) : null; }
  get userNs() { return this.size >= 96 ? this.u64(80) : null; }
  get sysNs() { return this.size >= 96 ? this.u64(88) : null; }
}

export class Open extends Event {
  get nr() { return this.i32(56); }
  get name() { return syscallName(this.nr); }
  get dfd() { return this.i32(60); }
  /** The open flags (`flags` is the record's own). */
  get flagsValue() { return this.u64(64); }
  get flagsStr() { return openFlagsParts(this.u32(64), this.u32(68)); }
  get mode() { return this.u64(72); }
  /** The file descriptor, or -errno. */
  get ret() { return this.i64(80); }
  /** `ENOENT` for a failed open, null for one that succeeded. */
  get errno() { return this.ret < 0 ? errnoName(-this.ret) : null; }
  get latencyNs() { return this.u64(88); }
  pathBytes() {
    const n = this.u16(96);
    if (n === 0 || 104 + n > this.size || this.batch[this.off + 104 + n - 1] !== 0) return new Uint8Array(0);
    return this.batch.subarray(this.off + 104, this.off + 104 + n - 1);
  }
  /** The path as the process passed it. */
  get path() { return utf8.decode(this.pathBytes()); }
  get pathTruncated() { return (this.flags & 1) !== 0; }
  get baseTruncated() { return (this.flags & 2) !== 0; }
  /** The directory of a relative path, innermost name first. */
  baseNames() {
    const pathLen = this.u16(96), baseLen = this.u16(98);
    const depth = this.u16(100);
    const start = 104 + pathLen, end = Math.min(start + baseLen, this.size);
    const rec = this.bytes.subarray(0, end);
    const names = [];
    let at = start;
    while (at < end && names.length < depth) {
      const nul = rec.indexOf(0, at);
      if (nul < 0) break;
      names.push(utf8.decode(rec.subarray(at, nul)));
      at = nul + 1;
    }
    return names;
  }
  /** The path made absolute with the directory it was relative to. */
  get fullPath() {
    const path = this.path;
    if (path.startsWith("/") || !path || !(this.flags & 4)) return path;
    let full = this.baseTruncated ? "\u2026" : "";
    for (const name of this.baseNames().reverse()) full += "/" + name;
    let rel = path;
    while (rel.startsWith("./")) rel = rel.slice(2).replace(/^\/+/, "");
    if (rel !== ".") full += "/" + rel;
    else if (!full) full = "/";
    return full;
  }
}

export class Tracepoint extends Event {
  get eventId() { return this.u32(56); }
  get truncated() { return (this.flags & 1) !== 0; }
  /** The entry's bytes (a Uint8Array), never past the record. */
  get data() {
    const n = Math.min(this.u32(60), 4032, Math.max(this.bodyEnd() - 64, 0));
    return this.batch.subarray(this.off + 64, this.off + 64 + n);
  }
  /** Field `f` (a schema field: `wt.schema(sub)` gives them) of this entry, or null. */
  field(f) {
    return readField(this.data, f.kind, f.offset, f.size, f.count, f.signed);
  }
}

function int(bytes, off, size, signed) {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  switch (size) {
    case 1: return signed ? v.getInt8(off) : v.getUint8(off);
    case 2: return signed ? v.getInt16(off, true) : v.getUint16(off, true);
    case 4: return signed ? v.getInt32(off, true) : v.getUint32(off, true);
    case 8: return signed ? v.getBigInt64(off, true) : v.getBigUint64(off, true);
    default: return null;
  }
}

/** A tracepoint field of `data` as docs/abi.md lays it out; null outside the entry. */
export function readField(data, kind, offset, size, count, signed) {
  const n = data.length;
  const inside = (off, len) => off + len <= n;
  switch (kind) {
    case "signed":
    case "unsigned":
      return inside(offset, size) ? int(data, offset, size, kind === "signed") : null;
    case "text":
      return inside(offset, size) ? text(data.subarray(offset, offset + size)) : null;
    case "dynamic-text":
    case "dynamic-bytes": {
      if (!inside(offset, 4)) return null;
      const loc = int(data, offset, 4, false);
      const at = loc & 0xffff, len = loc >>> 16;
      if (!inside(at, len)) return null;
      const b = data.subarray(at, at + len);
      return kind === "dynamic-text" ? text(b) : b;
    }
    case "array": {
      if (count === 0 || size % count || !inside(offset, size)) return null;
      const elem = size / count;
      if (![1, 2, 4, 8].includes(elem)) return null;
      const out = [];
      for (let i = 0; i < count; i++) out.push(int(data, offset + i * elem, elem, signed));
      return out;
    }
    default:
      return null;
  }
}

export class User extends Event {
  get probe() { return this.u32(56); }
  get nargs() { return Math.min(this.u32(60), 12); }
  get ip() { return this.big(64); }
  get args() { return Array.from({ length: this.nargs }, (_, i) => this.arg(i)); }
  arg(i) { return i >= 0 && i < this.nargs ? this.big(72 + 8 * i) : 0n; }
  get isReturn() { return (this.flags & 1) !== 0; }
  /** A uretprobe's return value, null for an entry. */
  get retval() { return this.isReturn ? this.big(72) : null; }
}

export class Sample extends Event {
  get event() { return this.u32(56); }
  get cpu() { return this.u32(60); }
  get addr() { return this.big(64); }
  get ip() { return this.big(72); }
}

const CLASSES = { 1: SysEnter, 2: SysExit, 3: Exec, 4: Fork, 5: Exit, 6: Tracepoint, 7: User, 8: Sample, 10: Open };

/** Call `fn` with each record of `batch`, decoded; stops at the first malformed record, as
 * the host never sends one. (A plain loop: QuickJS runs generators slowly.) */
export function forEachEvent(batch, fn) {
  const view = new DataView(batch.buffer, batch.byteOffset, batch.byteLength);
  const end = batch.length;
  let off = 0;
  while (off + HEADER_SIZE <= end) {
    const kind = view.getUint16(off, true), size = view.getUint16(off + 2, true);
    if (size < HEADER_SIZE || size % 8 || off + size > end) return;
    const Class = CLASSES[kind];
    if (Class && size >= MIN_SIZE[kind]) fn(new Class(batch, view, off, kind, size));
    off += size;
  }
}

/** The records of `batch`, decoded, as an array. */
export function events(batch) {
  const out = [];
  forEachEvent(batch, (ev) => out.push(ev));
  return out;
}
