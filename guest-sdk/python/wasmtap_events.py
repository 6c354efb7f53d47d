"""The batch layout of docs/abi.md, decoded: wasmtap's events for Python plugins.

`events(batch)` walks a batch and yields one object per record, without copying the
record: a `memoryview` slice and a few `struct.unpack_from` calls, done only for the
fields a plugin reads. Every kind of the layout has its class (`SysEnter`, `SysExit`,
`Exec`, `Fork`, `Exit`, `Tracepoint`, `User`, `Sample`, `Open`); all of them have the
header's fields (`ts_ns`, `pid`, `tid`, `uid`, `gid`, `cgroup_id`, `comm`, `sub`,
`flags`) and `stacks`.

This module needs nothing of the host, so its tests run under any Python: the table
`guest-sdk/vectors.json`, written by the Rust SDK, is what every SDK must read alike
(`python3 guest-sdk/python/test_events.py`).
"""

import struct

from wasmtap_names import ERRNOS, OPEN_FLAGS, SYSCALLS

HEADER_SIZE = 56
_HEADER = struct.Struct("<HHHHQIIIIQ")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_STACK_FLAG = 0x8000
_MAX_FRAMES = 127

# Record kinds (docs/abi.md).
SYS_ENTER, SYS_EXIT, EXEC, FORK, EXIT, TRACEPOINT, USER, SAMPLE, OPEN = 1, 2, 3, 4, 5, 6, 7, 8, 10


def syscall_name(nr):
    """The x86_64 syscall called `nr`, or None."""
    if 0 <= nr < len(SYSCALLS) and SYSCALLS[nr]:
        return SYSCALLS[nr]
    return None


def errno_name(e):
    """`ENOENT` for 2 (or -2), or None."""
    return ERRNOS.get(abs(e))


def open_flags(flags):
    """Open flags as `O_WRONLY|O_CREAT|O_TRUNC`: the access mode, each flag, unknown bits in hex."""
    rest = flags & ~0o3
    if flags & 0o10000000:
        out = ["O_PATH"]
        rest &= ~0o10000000
    else:
        out = [("O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE")[flags & 0o3]]
    for bits, name in OPEN_FLAGS:
        if rest & bits == bits:
            out.append(name)
            rest &= ~bits
    if rest:
        out.append(hex(rest))
    return "|".join(out)


def _text(b):
    """Bytes up to the first NUL, as text (invalid UTF-8 replaced)."""
    end = b.find(b"\0")
    return (b if end < 0 else b[:end]).decode("utf-8", "replace")


class Event:
    """One record: the header's fields, and `record` (a memoryview of the whole record)."""

    __slots__ = ("record", "kind", "size", "sub", "flags", "ts_ns", "pid", "tid", "uid", "gid", "cgroup_id")

    def __init__(self, record, head):
        self.record = record
        (self.kind, self.size, self.sub, self.flags, self.ts_ns, self.pid, self.tid, self.uid, self.gid,
         self.cgroup_id) = head

    @property
    def comm(self):
        """The task's command name."""
        return _text(bytes(self.record[40:56]))

    @property
    def stacks(self):
        """(kernel frames, user frames), innermost first, or None if the record carries no stacks."""
        counts = self._trailer()
        if counts is None:
            return None
        k, u = counts
        frames = struct.unpack_from("<%dQ" % (k + u), self.record, self.size - 8 - 8 * (k + u))
        return list(frames[:k]), list(frames[k:])

    def _trailer(self):
        """(kernel, user) frame counts of a stack trailer that fits the record, or None."""
        if not self.flags & _STACK_FLAG or self.kind not in (TRACEPOINT, USER, SAMPLE):
            return None
        k, u = struct.unpack_from("<HH", self.record, self.size - 8)
        if k > _MAX_FRAMES or u > _MAX_FRAMES or self.size - 8 - 8 * (k + u) < _MIN_SIZE[self.kind]:
            return None
        return k, u

    def _body_end(self):
        """Where the kind's own bytes end: before the stack trailer, if any."""
        counts = self._trailer()
        return self.size if counts is None else self.size - 8 - 8 * (counts[0] + counts[1])

    def _u16(self, off):
        return _U16.unpack_from(self.record, off)[0]

    def _u32(self, off):
        return _U32.unpack_from(self.record, off)[0]

    def _i32(self, off):
        return _I32.unpack_from(self.record, off)[0]

    def _u64(self, off):
        return _U64.unpack_from(self.record, off)[0]

    def _i64(self, off):
        return _I64.unpack_from(self.record, off)[0]

    def __repr__(self):
        return "<%s pid=%d comm=%r>" % (type(self).__name__, self.pid, self.comm)


class SysEnter(Event):
    """`syscall:NAME:entry`, `tracepoint:raw_syscalls:sys_enter`."""

    __slots__ = ()

    @property
    def nr(self):
        return self._i64(56)

    @property
    def name(self):
        return syscall_name(self.nr)

    @property
    def args(self):
        return list(struct.unpack_from("<6Q", self.record, 64))

    def arg(self, i):
        return self._u64(64 + 8 * i) if 0 <= i < 6 else 0


class SysExit(Event):
    """`syscall:NAME:exit`, `tracepoint:raw_syscalls:sys_exit`."""

    __slots__ = ()

    @property
    def nr(self):
        return self._i64(56)

    @property
    def name(self):
        return syscall_name(self.nr)

    @property
    def ret(self):
        return self._i64(64)


class Exec(Event):
    """`proc:exec`: a completed (or failed) execve/execveat."""

    __slots__ = ()

    @property
    def ppid(self):
        return self._u32(56)

    @property
    def ret(self):
        return self._i32(60)

    @property
    def argc(self):
        return self._u32(64)

    @property
    def truncated(self):
        return bool(self.flags & 1)

    @property
    def args(self):
        """The arguments, as many as `argc` says and the record holds."""
        n = self._u32(68)
        if n == 0:
            return []
        b = bytes(self.record[72:72 + min(n, self.size - 72)])
        if b.endswith(b"\0"):
            b = b[:-1]
        return [p.decode("utf-8", "replace") for p in b.split(b"\0")[:self.argc]]


class Fork(Event):
    """`proc:fork`: the header describes the parent."""

    __slots__ = ()

    @property
    def child_pid(self):
        return self._u32(56)

    @property
    def child_tid(self):
        return self._u32(60)

    @property
    def is_thread(self):
        return bool(self.flags & 1)


class Exit(Event):
    """`proc:exit`: a task ended."""

    __slots__ = ()

    @property
    def exit_code(self):
        """The wait status: `code << 8 | signal`."""
        return self._i32(56)

    @property
    def code(self):
        return (self.exit_code >> 8) & 0xff

    @property
    def signal(self):
        return self.exit_code & 0x7f

    @property
    def core_dumped(self):
        return bool(self.exit_code & 0x80)

    @property
    def ppid(self):
        return self._u32(60)

    @property
    def start_ns(self):
        return self._u64(64)

    @property
    def group_dead(self):
        """The last thread of its process."""
        return bool(self.flags & 1)

    @property
    def cpu_ns(self):
        """CPU time of the process so far (None in recordings older than the field)."""
        return self._u64(72) if self.size >= 96 else None

    @property
    def user_ns(self):
        return self._u64(80) if self.size >= 96 else None

    @property
    def sys_ns(self):
        return self._u64(88) if self.size >= 96 else None


class Open(Event):
    """`file:open`: a completed open, openat, openat2 or creat, with its path."""

    __slots__ = ()

    @property
    def nr(self):
        return self._i32(56)

    @property
    def name(self):
        return syscall_name(self.nr)

    @property
    def dfd(self):
        return self._i32(60)

    @property
    def flags_value(self):
        """The open flags (`flags` is the record's own)."""
        return self._u64(64)

    @property
    def flags_str(self):
        return open_flags(self.flags_value)

    @property
    def mode(self):
        return self._u64(72)

    @property
    def ret(self):
        """The file descriptor, or -errno."""
        return self._i64(80)

    @property
    def errno(self):
        """`ENOENT` for a failed open, None for one that succeeded."""
        r = self.ret
        return errno_name(-r) if r < 0 else None

    @property
    def latency_ns(self):
        return self._u64(88)

    def _path_bytes(self):
        n = self._u16(96)
        if n == 0 or 104 + n > self.size or self.record[104 + n - 1] != 0:
            return b""
        return bytes(self.record[104:104 + n - 1])

    @property
    def path(self):
        """The path as the process passed it."""
        return self._path_bytes().decode("utf-8", "replace")

    @property
    def path_truncated(self):
        return bool(self.flags & 1)

    @property
    def base_truncated(self):
        return bool(self.flags & 2)

    def base_names(self):
        """The directory of a relative path, innermost name first."""
        path_len, base_len, depth = self._u16(96), self._u16(98), self._u16(100)
        start = 104 + path_len
        end = min(start + base_len, self.size)
        if start > end:
            return []
        names = bytes(self.record[start:end]).split(b"\0")
        return names[:min(depth, max(len(names) - 1, 0))]

    @property
    def full_path(self):
        """The path made absolute with the directory it was relative to."""
        path = self.path
        if path.startswith("/") or not path or not self.flags & 4:
            return path
        full = "\u2026" if self.base_truncated else ""
        for name in reversed(self.base_names()):
            full += "/" + name.decode("utf-8", "replace")
        rel = path
        while rel.startswith("./"):
            rel = rel[2:].lstrip("/")
        if rel != ".":
            full += "/" + rel
        elif not full:
            full = "/"
        return full


class Tracepoint(Event):
    """`tracepoint:CAT:NAME`: the kernel's entry, read by field name through the schema."""

    __slots__ = ()

    @property
    def event_id(self):
        return self._u32(56)

    @property
    def truncated(self):
        return bool(self.flags & 1)

    @property
    def data(self):
        """The entry's bytes (a memoryview), never past the record."""
        n = min(self._u32(60), 4032, max(self._body_end() - 64, 0))
        return self.record[64:64 + n]

    def field(self, f):
        """Field `f` (a schema field: `wasmtap.schema(sub)` gives them) of this entry, or None."""
        return read_field(self.data, f.kind, f.offset, f.size, f.count, f.signed)


def _kind_name(kind):
    """A field kind as its WIT name, from the bindings' enum or a string."""
    name = getattr(kind, "name", kind)
    return name.lower().replace("_", "-")


def _int(b, signed):
    if len(b) not in (1, 2, 4, 8):
        return None
    return int.from_bytes(b, "little", signed=signed)


def read_field(data, kind, offset, size, count, signed):
    """A tracepoint field of `data` as docs/abi.md lays it out; None outside the entry."""
    kind = _kind_name(kind)
    n = len(data)

    def span(off, length):
        if off + length > n:
            return None
        return bytes(data[off:off + length])

    if kind in ("signed", "unsigned"):
        b = span(offset, size)
        return None if b is None else _int(b, kind == "signed")
    if kind == "text":
        b = span(offset, size)
        return None if b is None else _text(b)
    if kind in ("dynamic-text", "dynamic-bytes"):
        loc = span(offset, 4)
        if loc is None:
            return None
        loc = int.from_bytes(loc, "little")
        b = span(loc & 0xffff, loc >> 16)
        if b is None:
            return None
        return _text(b) if kind == "dynamic-text" else b
    if kind == "array":
        if count == 0 or size % count:
            return None
        elem = size // count
        b = span(offset, size)
        if b is None or elem not in (1, 2, 4, 8):
            return None
        return [int.from_bytes(b[i:i + elem], "little", signed=signed) for i in range(0, size, elem)]
    return None


class User(Event):
    """`uprobe:`, `uretprobe:`, `usdt:`."""

    __slots__ = ()

    @property
    def probe(self):
        return self._u32(56)

    @property
    def nargs(self):
        return min(self._u32(60), 12)

    @property
    def ip(self):
        return self._u64(64)

    @property
    def args(self):
        return list(struct.unpack_from("<%dQ" % self.nargs, self.record, 72))

    def arg(self, i):
        return self._u64(72 + 8 * i) if 0 <= i < self.nargs else 0

    @property
    def is_return(self):
        return bool(self.flags & 1)

    @property
    def retval(self):
        """A uretprobe's return value, None for an entry."""
        return self._u64(72) if self.is_return else None


class Sample(Event):
    """`profile:hz:N`, `software:NAME:N`: a perf software event."""

    __slots__ = ()

    @property
    def event(self):
        return self._u32(56)

    @property
    def cpu(self):
        return self._u32(60)

    @property
    def addr(self):
        return self._u64(64)

    @property
    def ip(self):
        return self._u64(72)


_CLASSES = {SYS_ENTER: SysEnter, SYS_EXIT: SysExit, EXEC: Exec, FORK: Fork, EXIT: Exit,
            TRACEPOINT: Tracepoint, USER: User, SAMPLE: Sample, OPEN: Open}
# The least each kind's fixed part needs (exit: older recordings have 72).
_MIN_SIZE = {SYS_ENTER: 112, SYS_EXIT: 72, EXEC: 72, FORK: 64, EXIT: 72, TRACEPOINT: 64, USER: 168,
             SAMPLE: 80, OPEN: 104}


def events(batch):
    """The records of `batch`, decoded; stops at the first malformed record, as the host never sends one."""
    view = memoryview(batch)
    off, end = 0, len(view)
    unpack = _HEADER.unpack_from
    while off + HEADER_SIZE <= end:
        head = unpack(view, off)
        kind, size = head[0], head[1]
        if size < HEADER_SIZE or size % 8 or off + size > end:
            return
        cls = _CLASSES.get(kind)
        if cls is not None and size >= _MIN_SIZE[kind]:
            yield cls(view[off:off + size], head)
        off += size
