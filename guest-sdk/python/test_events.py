"""The Python SDK's decoder against the table every SDK shares (guest-sdk/vectors.json,
written by the Rust SDK): each record, each field, the same value.

    python3 guest-sdk/python/test_events.py [VECTORS.json]

Prints one line per record and exits 1 naming every field that differs.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wasmtap_events as w  # noqa: E402

KINDS = {"sys_enter": w.SysEnter, "sys_exit": w.SysExit, "exec": w.Exec, "fork": w.Fork, "exit": w.Exit,
         "tracepoint": w.Tracepoint, "user": w.User, "sample": w.Sample, "open": w.Open}


class Field:
    def __init__(self, f):
        self.name, self.kind, self.offset = f["name"], f["kind"], f["offset"]
        self.size, self.count, self.signed = f["size"], f["count"], f["signed"]


def decoded(ev, key, schema):
    if key == "kind":
        return next(k for k, c in KINDS.items() if type(ev) is c)
    if key == "data":
        return bytes(ev.data).hex()
    if key == "fields":
        out = {}
        for f in schema:
            v = ev.field(f)
            out[f.name] = v.hex() if isinstance(v, bytes) else v
        return out
    if key == "stacks":
        s = ev.stacks
        return None if s is None else {"kernel": s[0], "user": s[1]}
    return getattr(ev, key)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "vectors.json")
    table = json.load(open(path))
    bad = 0
    for case in table["records"]:
        record = bytes.fromhex(case["record"])
        evs = list(w.events(record))
        if len(evs) != 1:
            print("FAIL %s: %d events decoded, not 1" % (case["name"], len(evs)))
            bad += 1
            continue
        schema = [Field(f) for f in case["schema"]]
        wrong = [(k, want, decoded(evs[0], k, schema)) for k, want in case["expect"].items()
                 if decoded(evs[0], k, schema) != want]
        for k, want, got in wrong:
            print("FAIL %s: %s is %r, the Rust SDK reads %r" % (case["name"], k, got, want))
        bad += len(wrong)
        if not wrong:
            print("ok   %s (%d fields)" % (case["name"], len(case["expect"])))
    # A batch of every record back to back decodes to all of them; a cut one ends the batch.
    batch = b"".join(bytes.fromhex(c["record"]) for c in table["records"])
    n = len(list(w.events(batch)))
    if n != len(table["records"]):
        print("FAIL the whole table as one batch: %d events, not %d" % (n, len(table["records"])))
        bad += 1
    if len(list(w.events(batch[:-8]))) != len(table["records"]) - 1:
        print("FAIL a batch cut short: its last record is not dropped")
        bad += 1
    print("%d records, %d mismatches" % (len(table["records"]), bad))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
