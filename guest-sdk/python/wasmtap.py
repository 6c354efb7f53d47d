"""wasmtap's SDK for plugins in Python: the shape of the Rust SDK, in Python's idiom.

A plugin is a class; `world` makes it the component's exports:

    import wasmtap as wt

    class Opens(wt.Plugin):
        name, version = "py-opens", "0.1.0"
        description = "Which files are opened, and by whom?"
        params = [wt.Param("failed", wt.BOOLEAN, "false", "only opens that failed")]

        def start(self, params, plan):
            self.failed = params["failed"]
            plan.subscribe("file:open")
            self.opens = plan.table("opens", [("PID", wt.INT, 7), ("PATH", wt.TEXT, 0)])

        def on_event(self, ev):
            if isinstance(ev, wt.Open) and (ev.ret < 0 or not self.failed):
                wt.row(self.opens, ev.pid, ev.full_path)

    WitWorld = wt.world(Opens)

The plugin object lives as long as the run (the component keeps it in a module global:
each export call gets a new `WitWorld`, never a new plugin). Rows made during a call
are sent to the host together when the call returns, packed: one crossing of the
boundary per batch, not per row. Build with `wasmtap plugin build DIR`
(docs/languages.md).
"""

import struct
import traceback

from componentize_py_types import Err
from wit_world.imports import aggregations as _aggs
from wit_world.imports import kernel_aggregations as _kagg
from wit_world.imports import lifecycle as _life
from wit_world.imports import output as _out
from wit_world.imports import probes as _probes
from wit_world.imports import services as _services

from wasmtap_events import (  # noqa: F401  (the decoder is part of the SDK's surface)
    EXEC, EXIT, FORK, OPEN, SAMPLE, SYS_ENTER, SYS_EXIT, TRACEPOINT, USER,
    Event, Exec, Exit, Fork, Open, Sample, SysEnter, SysExit, Tracepoint, User,
    errno_name, events, open_flags, read_field, syscall_name,
)

# Parameter kinds.
INTEGER, BOOLEAN, TEXT_PARAM, DURATION = "integer", "boolean", "text", "duration"
# Column kinds.
INT, TEXT, TIMESTAMP = _out.ColumnKind.INTEGER, _out.ColumnKind.TEXT, _out.ColumnKind.TIMESTAMP
# Aggregation kinds and orders.
COUNT, SUM, MIN, MAX, AVG, QUANTIZE, LQUANTIZE = (
    _aggs.AggKind.COUNT, _aggs.AggKind.SUM, _aggs.AggKind.MIN, _aggs.AggKind.MAX, _aggs.AggKind.AVG,
    _aggs.AggKind.QUANTIZE, _aggs.AggKind.LQUANTIZE,
)
ASCENDING, DESCENDING, BY_KEY = (
    _aggs.AggOrder.VALUE_ASCENDING, _aggs.AggOrder.VALUE_DESCENDING, _aggs.AggOrder.KEY,
)


class Refuse(Exception):
    """Raised by `start`: the run does not begin, and the user reads the message."""


class Param:
    """A parameter the plugin takes: `--param NAME=VALUE`. `default=None` makes it required."""

    def __init__(self, name, kind, default, description):
        self.name, self.kind, self.default, self.description = name, kind, default, description

    def spec(self):
        kind = {INTEGER: _life.ParamKind.INTEGER, BOOLEAN: _life.ParamKind.BOOLEAN,
                TEXT_PARAM: _life.ParamKind.TEXT, DURATION: _life.ParamKind.DURATION}[self.kind]
        default = None if self.default is None else str(self.default)
        return _life.ParamSpec(self.name, kind, default, self.description)

    def value(self, text):
        """The host validated and normalized it: an int (durations in ns), a bool, or text."""
        if self.kind in (INTEGER, DURATION):
            return int(text)
        if self.kind == BOOLEAN:
            return text == "true"
        return text


class Plugin:
    """Subclass it; every method has a default that does nothing."""

    name = "plugin"
    version = "0.1.0"
    description = ""
    params = []

    def start(self, params, plan):
        """`params`: name to value (typed); `plan`: a `Plan` to fill. Raise `Refuse` to refuse."""

    def on_batch(self, batch):
        """Every record of the batch in order; by default each to `on_event`."""
        on_event = self.on_event
        for ev in events(batch):
            on_event(ev)

    def on_event(self, ev):
        """One decoded event (`SysEnter`, `Open`, `Tracepoint`...)."""

    def on_tick(self, sub, now_ns):
        """A timer or `begin`/`end` subscription fired; return aggregations to print now."""
        return []

    def finish(self):
        """The end: return the final aggregations."""
        return []


_OPS = {"==": _probes.CmpOp.EQ, "!=": _probes.CmpOp.NE, "<": _probes.CmpOp.LT, "<=": _probes.CmpOp.LE,
        ">": _probes.CmpOp.GT, ">=": _probes.CmpOp.GE, "&": _probes.CmpOp.MASK_ANY, "!&": _probes.CmpOp.MASK_NONE}


def _filter(syscalls=(), uids=(), comms=(), pids=(), cgroups=(), predicates=()):
    preds = [_probes.Predicate(f, _OPS[op], int(v)) for f, op, v in predicates]
    return _probes.Filter(list(syscalls), list(uids), list(comms), list(pids), list(cgroups), preds)


def _source(key):
    """A kernel aggregation's key or value: comm, pid, tid, uid, cgroup, syscall,
    latency, or a numeric field of the probe by name (`count`, `ret`, `bytes`)."""
    fixed = {"comm": _kagg.AggSource_Comm, "pid": _kagg.AggSource_Pid, "tid": _kagg.AggSource_Tid,
             "uid": _kagg.AggSource_Uid, "cgroup": _kagg.AggSource_Cgroup, "syscall": _kagg.AggSource_Syscall,
             "latency": _kagg.AggSource_Latency}
    if key in fixed:
        return fixed[key]()
    return _kagg.AggSource_Field(key)


def _function(fn):
    if isinstance(fn, tuple) and fn[0] == "lhist":
        return _kagg.KernelFunction_LinearHistogram(_kagg.LinearBuckets(fn[1], fn[2], fn[3]))
    return {"count": _kagg.KernelFunction_Count, "sum": _kagg.KernelFunction_Sum, "min": _kagg.KernelFunction_Min,
            "max": _kagg.KernelFunction_Max, "hist": _kagg.KernelFunction_Log2Histogram}[fn]()


def _correlation(key):
    if key == "tid":
        return _kagg.Correlation_Tid()
    if key.startswith("task:"):
        return _kagg.Correlation_Task(key[5:])
    return _kagg.Correlation_Field(key)


class Plan:
    """What the plugin asks for, filled in `start`: subscriptions, tables, kernel aggregations."""

    def __init__(self):
        self.subscriptions, self.tables, self.aggregations = [], [], []

    def subscribe(self, probe, stacks="", optional=False, **filter):
        """Subscribe to `probe` (`file:open`, `syscall:read:exit`, `tracepoint:sched:sched_switch`...),
        filtered in the kernel by `syscalls=`, `uids=`, `comms=`, `pids=`, `cgroups=` and
        `predicates=[("ret", "<", 0)]`; `stacks` is "", "kernel", "user" or "kernel,user".
        Returns the subscription's index (`Event.sub`)."""
        mode = _probes.StackMode(0)
        for part in filter_parts(stacks):
            mode |= {"kernel": _probes.StackMode.KERNEL, "user": _probes.StackMode.USER}[part]
        self.subscriptions.append(_probes.Subscription(probe, _filter(**filter), mode, optional))
        return len(self.subscriptions) - 1

    def table(self, name, columns):
        """A table of rows: `columns` as (name, INT | TEXT | TIMESTAMP, width). Returns its id for `row`."""
        self.tables.append(_out.TableSpec(name, [_out.Column(n, k, w) for n, k, w in columns]))
        return len(self.tables) - 1

    def kernel_agg(self, name, probe, function="count", keys=(), value=None, start=None, start_key="tid",
                   end_key="tid", **filter):
        """An aggregation the kernel computes (no event leaves it): `function` is count, sum, min, max,
        hist or ("lhist", MIN, MAX, STEP) of `value` (a field name, or "latency" with `start`, the probe
        that starts the interval), keyed by up to four of comm, pid, tid, uid, cgroup, syscall or a
        field. Returns its id for `from_kernel`."""
        start_event = None
        if start is not None:
            start_event = _kagg.StartEvent(start, _filter(), _correlation(start_key), _correlation(end_key), [])
            value = "latency"
        src = _source(value) if value is not None else _kagg.AggSource_Comm()
        self.aggregations.append(_kagg.KernelAggregation(
            name, probe, _filter(**filter), [_source(k) for k in keys], _function(function), src, start_event))
        return len(self.aggregations) - 1

    def kernel_count(self, name, probe, keys=(), **filter):
        """`kernel_agg` with `count`: events of `probe` by key, counted in the kernel."""
        return self.kernel_agg(name, probe, "count", keys, **filter)

    def _wit(self):
        return _life.Plan(self.subscriptions, self.tables, self.aggregations)


def filter_parts(text):
    return [p.strip() for p in text.split(",") if p.strip()]


# Rows of the current call, packed as `output.emit-packed` reads them.
_pending = bytearray()
_ROW = struct.Struct("<IH")
_INT_CELL = struct.Struct("<Bq")
_TEXT_CELL = struct.Struct("<BI")


def row(table, *values):
    """Append a row to `table` (an id from `Plan.table`): ints and text, one per column."""
    out = _pending
    out += _ROW.pack(table, len(values))
    for v in values:
        if isinstance(v, int):
            out += _INT_CELL.pack(0, v)
        else:
            b = str(v).encode("utf-8", "replace")
            out += _TEXT_CELL.pack(1, len(b))
            out += b


def _flush():
    if _pending:
        _out.emit_packed(bytes(_pending))
        _pending.clear()


def echo(text):
    """Print text on the run's output (a newline is not added)."""
    _out.print(text)


def log(msg, level="info"):
    """A diagnostic on stderr, with the plugin's name: level debug, info, warn or error."""
    lvl = {"debug": _services.Level.DEBUG, "info": _services.Level.INFO, "warn": _services.Level.WARN,
           "error": _services.Level.ERROR}[level]
    _services.log(lvl, msg)


def exit():  # noqa: A001  (bpftrace's name)
    """End the run as Ctrl-C would, once this call returns."""
    _services.exit()


def monotonic_ns():
    return _services.monotonic_ns()


_schemas = {}


def schema(sub):
    """The fields of subscription `sub`'s records (tracepoints), asked of the host once."""
    if sub not in _schemas:
        s = _probes.schema(sub)
        _schemas[sub] = {} if s is None else {f.name: f for f in s.fields}
    return _schemas[sub]


def field(ev, name):
    """Field `name` of a tracepoint event, by its schema; None if it has none."""
    f = schema(ev.sub).get(name)
    return None if f is None else ev.field(f)


def symbolize(pid, addrs, kernel=False):
    """Frames for the addresses of one stack (user of `pid`, or kernel)."""
    return _services.symbolize([_services.StackRequest(pid, kernel, list(addrs))])[0]


def _value(v):
    return _out.Value_Int(v) if isinstance(v, int) else _out.Value_Text(str(v))


def _key(k):
    return [_value(p) for p in (k if isinstance(k, tuple) else (k,))]


def aggregation(name, kind, entries, title="", keys=("key",), order=ASCENDING, top=0):
    """An aggregation to return from `on_tick` or `finish`: `entries` as (key, value) pairs, a key
    one value or a tuple; a value an int, or for QUANTIZE/LQUANTIZE a list of (low, high, count)."""
    out = []
    for k, v in entries:
        if isinstance(v, int):
            val = _aggs.AggValue_Scalar(v)
        else:
            buckets, total = v
            val = _aggs.AggValue_Histogram(_aggs.Histogram([_aggs.Bucket(lo, hi, n) for lo, hi, n in buckets], total))
        out.append(_aggs.AggEntry(_key(k), val))
    return _aggs.Aggregation(name, title, list(keys), kind, order, top, out)


class Count(dict):
    """Counts by key: `c.add(key)`; `c.report("name")` is the aggregation."""

    def add(self, key, n=1):
        self[key] = self.get(key, 0) + n

    def report(self, name, title="", keys=("key",), order=ASCENDING, top=0):
        return aggregation(name, COUNT, self.items(), title, keys, order, top)


def log2_bucket(v):
    """The power-of-two bucket of `v`, as DTrace's quantize and the host number it."""
    bits = abs(v).bit_length()
    return -bits if v < 0 else bits


def log2_range(b):
    """The values [low, high) of bucket `b`."""
    b = max(-64, min(63, b))
    if b == 0:
        return 0, 1
    if b == 63:
        return 1 << 62, (1 << 63) - 1
    if b > 0:
        return 1 << (b - 1), 1 << b
    if b == -64:
        return -(1 << 63), -(1 << 63) + 1
    return -(1 << -b) + 1, -(1 << (-b - 1)) + 1


class Hist(dict):
    """Power-of-two histograms by key (bpftrace's `hist`): `h.add(key, value)`."""

    def add(self, key, value):
        buckets = self.get(key)
        if buckets is None:
            buckets = self[key] = [{}, 0]
        b = log2_bucket(value)
        buckets[0][b] = buckets[0].get(b, 0) + 1
        buckets[1] += value

    def report(self, name, title="", keys=("key",), order=ASCENDING, top=0):
        entries = []
        for k, (counts, total) in self.items():
            entries.append((k, ([(*log2_range(b), n) for b, n in sorted(counts.items())], total)))
        return aggregation(name, QUANTIZE, entries, title, keys, order, top)


def from_kernel(agg_id, name, kind=COUNT, title="", keys=("key",), order=ASCENDING, top=0, reset=False):
    """Kernel aggregation `agg_id`, read now, as an aggregation to return; a `syscall` key part
    shows the syscall's name."""
    try:
        entries = _kagg.read_aggregation(agg_id, reset)
    except Err as e:
        log("kernel aggregation %s: %s" % (name, e.value), "warn")
        entries = []
    named = [i for i, k in enumerate(keys) if k == "syscall"]
    for e in entries:
        for i in named:
            part = e.key[i] if i < len(e.key) else None
            if isinstance(part, _out.Value_Int):
                n = syscall_name(part.value)
                if n is not None:
                    e.key[i] = _out.Value_Text(n)
    return _aggs.Aggregation(name, title, list(keys), kind, order, top, entries)


_plugin = None


def _traceback(e):
    """Where `e` was raised, innermost last: file, line and function of each frame. (Not
    the source lines: reading them would open files, which a plugin cannot.)"""
    frames = traceback.StackSummary.extract(traceback.walk_tb(e.__traceback__), lookup_lines=False)
    return "".join("\n  %s:%d in %s" % (f.filename, f.lineno, f.name) for f in frames)


def _guard(what, call):
    """Run a plugin method; an exception is logged with where it was raised, then faults the call."""
    try:
        return call()
    except Refuse:
        raise
    except BaseException as e:
        log("%s raised %s: %s%s" % (what, type(e).__name__, e, _traceback(e)), "error")
        raise


def world(cls):
    """The component's exports around one instance of `cls`, made now and kept for the run."""
    global _plugin
    _plugin = cls()

    class WitWorld:
        def info(self):
            p = _plugin
            return _life.PluginInfo(p.name, p.version, p.description, [q.spec() for q in p.params])

        def start(self, params):
            p = _plugin
            given = {q.name: q.value for q in params}
            values = {}
            for spec in p.params:
                text = given.get(spec.name, None if spec.default is None else str(spec.default))
                values[spec.name] = None if text is None else spec.value(text)
            plan = Plan()
            try:
                _guard("start", lambda: p.start(values, plan))
            except Refuse as e:
                raise Err(str(e))
            finally:
                _flush()
            return plan._wit()

        def on_batch(self, batch):
            try:
                _guard("on_batch", lambda: _plugin.on_batch(batch))
            finally:
                _flush()

        def on_tick(self, sub, now_ns):
            try:
                return list(_guard("on_tick", lambda: _plugin.on_tick(sub, now_ns)) or [])
            finally:
                _flush()

        def finish(self):
            try:
                return list(_guard("finish", lambda: _plugin.finish()) or [])
            finally:
                _flush()

    return WitWorld
