//! Unix-socket helpers the daemon needs: who is on the other end, and receiving a passed fd.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Credentials of a connected peer, as the kernel recorded them at `connect()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix socket.
pub fn peer_cred(socket: &impl AsRawFd) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid as u32,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Receives up to `buf.len()` bytes and at most one fd passed with `SCM_RIGHTS`.
/// Extra fds (a misbehaving peer) are closed, never leaked.
pub fn recv_with_fd(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let (n, mut fds) = recv_with_fds(socket, buf, 1)?;
    Ok((n, fds.pop()))
}

/// Receives up to `buf.len()` bytes and at most `max_fds` fds passed with `SCM_RIGHTS`, in the
/// order sent. Extra fds (a misbehaving peer) are closed, never leaked.
pub fn recv_with_fds(
    socket: &impl AsRawFd,
    buf: &mut [u8],
    max_fds: usize,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; we point it at live buffers of the stated sizes.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg writes within the buffers described by `msg`; MSG_CMSG_CLOEXEC keeps
    // received fds from leaking into children.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut received = Vec::new();
    // SAFETY: walking the control messages the kernel just wrote, with libc's CMSG macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const i32;
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<i32>();
                for i in 0..count {
                    let fd = OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i)));
                    if received.len() < max_fds {
                        received.push(fd);
                    } // else: dropped, i.e. closed
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok((n as usize, received))
}

/// A pidfd for `pid` (`pidfd_open(2)`, Linux 5.3+): a handle that stays bound to this process
/// even after its pid is reused, and becomes readable when the process exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new fd that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process behind a pidfd has exited (its pidfd is readable).
pub fn pidfd_exited(pidfd: &impl AsRawFd) -> bool {
    let mut fds = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: polls one fd we own, without waiting.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    n > 0 && fds[0].revents != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_tells_when_its_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pidfd = match pidfd_open(child.id()) {
            Ok(fd) => fd,
            Err(e) => {
                child.kill().unwrap();
                child.wait().unwrap();
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    return; // a kernel before 5.3
                }
                panic!("pidfd_open: {e}");
            }
        };
        assert!(!pidfd_exited(&pidfd));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(pidfd_exited(&pidfd));
        assert!(pidfd_open(u32::MAX >> 1).is_err(), "no such process");
    }
}
