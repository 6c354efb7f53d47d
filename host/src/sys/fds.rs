//! File descriptors between processes: passed over a Unix socket (`SCM_RIGHTS`), and
//! pidfds. The shared host's client hands the daemon its stdout and stderr, so that the
//! run writes the user's output itself, and a pidfd of its `-c` command, so that the
//! daemon checks the very process it was told of.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 8;

/// Send `bytes` on socket `sock`, with `fds` as `SCM_RIGHTS` on its first byte. Returns the
/// bytes sent (the caller sends the rest, if any, without descriptors).
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many descriptors"));
    }
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut space = [0u64; 8]; // at least CMSG_SPACE of MAX_FDS ints, aligned
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        let data_len = std::mem::size_of_val(raw.as_slice());
        // SAFETY: CMSG_SPACE only computes a size.
        let space_len = unsafe { libc::CMSG_SPACE(data_len as u32) } as usize;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = space_len;
        // SAFETY: msg_control points at `space`, 64 bytes, at least CMSG_SPACE of eight
        // ints (48 bytes), so the first header and its data lie within it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len as u32) as usize;
            std::ptr::copy_nonoverlapping(raw.as_ptr(), libc::CMSG_DATA(cmsg).cast::<RawFd>(), raw.len());
        }
    }
    loop {
        // SAFETY: msg describes one iovec over `bytes` and control data within `space`,
        // all alive for the call; the kernel only reads them.
        let n = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receive into `buf` from socket `sock` (non-blocking sockets answer `WouldBlock`), with
/// the descriptors that came along: at most [`MAX_FDS`], close-on-exec. Descriptors past
/// that, or cut short, are closed by the kernel and reported as an error.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [0u64; 8];
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: as in send_with_fds.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space);
    // SAFETY: msg describes `buf` and `space`, both alive and writable for the call.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of headers within
    // `space`; CMSG_FIRSTHDR/NXTHDR walk only those, and each SCM_RIGHTS header's data
    // holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors now owned by this process.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*cmsg).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other(format!("more than {MAX_FDS} descriptors in one message")));
    }
    Ok((n as usize, fds))
}

/// A pidfd of process `pid` (Linux 5.3).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// The pid a pidfd refers to, from its fdinfo (`Pid:`); None if `fd` is not a pidfd or the
/// process is gone (`Pid: -1`).
pub fn pidfd_pid(fd: BorrowedFd<'_>) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).ok()?;
    info.lines().find_map(|l| l.strip_prefix("Pid:")).and_then(|p| p.trim().parse().ok())
}

/// Whether the process of pidfd `fd` is still alive (a zombie counts as alive: it has
/// not been reaped, so its pid is not anyone else's).
pub fn pidfd_alive(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: signal 0 checks the target without sending anything; the pointer is null.
    let r = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), 0, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    r == 0
}

/// Give the child `cmd` starts the descriptors `fds`, open across its exec, as numbers
/// above every one of them (and at least 100); returns those numbers. In the parent they
/// stay close-on-exec, so no other child started meanwhile inherits them.
pub fn pass_to_child(cmd: &mut tokio::process::Command, fds: Vec<OwnedFd>) -> Vec<RawFd> {
    let first = fds.iter().map(AsRawFd::as_raw_fd).max().map_or(100, |m| (m + 1).max(100));
    let targets: Vec<RawFd> = (0..fds.len()).map(|i| first + i as RawFd).collect();
    let pairs: Vec<(RawFd, RawFd)> = fds.iter().map(AsRawFd::as_raw_fd).zip(targets.iter().copied()).collect();
    // SAFETY: the closure runs in the child between fork and exec. It only calls dup2,
    // which is async-signal-safe, and allocates nothing; its sources stay open (the
    // closure owns them) and lie below every target, so no dup2 overwrites a source.
    unsafe {
        cmd.pre_exec(move || {
            let _open = &fds;
            for &(from, to) in &pairs {
                if libc::dup2(from, to) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    targets
}

/// The file behind descriptor `fd`, which this process inherited from the one that
/// started it (a run started by the daemon: `--recording-fd`, `--flamegraph-fd`). Only
/// numbers past stdin, stdout and stderr, open, and made close-on-exec here.
pub fn inherited_file(fd: RawFd) -> io::Result<std::fs::File> {
    if fd < 3 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("descriptor {fd} is not an inherited file")));
    }
    // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was inherited across exec for
    // this purpose: nothing in this process owns it yet.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Why a descriptor a client passed may not be written by the run: it must be open for
/// writing, and a regular file, a pipe, a terminal or other character device, or a Unix
/// socket (nothing whose writes act with the writer's privileges, such as a netlink
/// socket).
pub fn check_output_fd(fd: BorrowedFd<'_>) -> Result<(), String> {
    // SAFETY: F_GETFL on a descriptor we own only reads its flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 || !matches!(flags & libc::O_ACCMODE, libc::O_WRONLY | libc::O_RDWR) {
        return Err("not open for writing".into());
    }
    // SAFETY: fstat fills `st`, plain data, for a descriptor we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error().to_string());
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG | libc::S_IFIFO | libc::S_IFCHR => Ok(()),
        libc::S_IFSOCK => {
            let mut domain: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: SO_DOMAIN writes one int into `domain`, whose size is passed.
            let r = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_DOMAIN,
                    (&mut domain as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            if r == 0 && domain == libc::AF_UNIX {
                Ok(())
            } else {
                Err("a socket other than a Unix socket".into())
            }
        }
        _ => Err("not a file, pipe, terminal or Unix socket".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_cross_a_socket_with_the_bytes_they_came_with() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (mut r, w) = std::io::pipe().unwrap();
        assert_eq!(send_with_fds(a.as_fd(), b"hello", &[w.as_fd()]).unwrap(), 5);
        drop(w);
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hello"[..], 1));
        let mut passed = std::fs::File::from(fds.into_iter().next().unwrap());
        passed.write_all(b"through").unwrap();
        drop(passed);
        let mut got = String::new();
        r.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through");
    }

    #[test]
    fn only_writable_files_pipes_terminals_and_unix_sockets_are_outputs() {
        let (r, w) = std::io::pipe().unwrap();
        assert!(check_output_fd(w.as_fd()).is_ok());
        assert_eq!(check_output_fd(r.as_fd()), Err("not open for writing".to_string()));
        let (s, _) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(check_output_fd(s.as_fd()).is_ok());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(check_output_fd(udp.as_fd()), Err("a socket other than a Unix socket".to_string()));
        let dir = std::fs::File::open("/").unwrap();
        assert!(check_output_fd(dir.as_fd()).is_err());
    }

    #[test]
    fn a_pidfd_names_its_process_while_it_lives() {
        let mut child = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let fd = pidfd_open(child.id()).unwrap();
        assert_eq!(pidfd_pid(fd.as_fd()), Some(child.id()));
        assert!(pidfd_alive(fd.as_fd()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!pidfd_alive(fd.as_fd()));
        let (r, _w) = std::io::pipe().unwrap();
        assert_eq!(pidfd_pid(r.as_fd()), None);
    }
}
