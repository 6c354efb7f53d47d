//! x86_64 Linux numbers plugins single out: syscalls and open flags.

/// x86_64 numbers of the syscalls plugins single out.
pub mod nr {
    #![allow(missing_docs)]
    pub const READ: i64 = 0;
    pub const WRITE: i64 = 1;
    pub const OPEN: i64 = 2;
    pub const CLOSE: i64 = 3;
    pub const PWRITE64: i64 = 18;
    pub const WRITEV: i64 = 20;
    pub const CLONE: i64 = 56;
    pub const FORK: i64 = 57;
    pub const VFORK: i64 = 58;
    pub const EXECVE: i64 = 59;
    pub const EXIT: i64 = 60;
    pub const WAIT4: i64 = 61;
    pub const KILL: i64 = 62;
    pub const CREAT: i64 = 85;
    pub const EXIT_GROUP: i64 = 231;
    pub const WAITID: i64 = 247;
    pub const OPENAT: i64 = 257;
    pub const PWRITEV: i64 = 296;
    pub const EXECVEAT: i64 = 322;
    pub const PWRITEV2: i64 = 328;
    pub const CLONE3: i64 = 435;
    pub const OPENAT2: i64 = 437;
}

/// Open flag constants (x86_64, octal as in asm-generic/fcntl.h).
pub mod o {
    #![allow(missing_docs)]
    pub const RDONLY: u64 = 0;
    pub const WRONLY: u64 = 0o1;
    pub const RDWR: u64 = 0o2;
    pub const ACCMODE: u64 = 0o3;
    pub const CREAT: u64 = 0o100;
    pub const EXCL: u64 = 0o200;
    pub const NOCTTY: u64 = 0o400;
    pub const TRUNC: u64 = 0o1000;
    pub const APPEND: u64 = 0o2000;
    pub const NONBLOCK: u64 = 0o4000;
    pub const DSYNC: u64 = 0o10000;
    pub const ASYNC: u64 = 0o20000;
    pub const DIRECT: u64 = 0o40000;
    pub const LARGEFILE: u64 = 0o100000;
    pub const DIRECTORY: u64 = 0o200000;
    pub const NOFOLLOW: u64 = 0o400000;
    pub const NOATIME: u64 = 0o1000000;
    pub const CLOEXEC: u64 = 0o2000000;
    pub const SYNC: u64 = 0o4010000;
    pub const PATH: u64 = 0o10000000;
    pub const TMPFILE: u64 = 0o20200000;
}
