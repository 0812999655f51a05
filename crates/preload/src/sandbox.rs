//! Programs that confine themselves with a seccomp filter: sshd's privilege-separated child, a
//! service under systemd's `SystemCallFilter=`, anything built on libseccomp. A call the filter
//! refuses usually kills the process (SIGSYS), and the filter cannot be asked what it allows.
//! So once the program is confined the library makes only the system calls any allocator needs
//! (mmap, munmap, madvise, futex), none of its own: no socket, doorbell or link check to the
//! daemon, no attach (a forked child's neither), no `mbind` of new chunks to a tier (objects
//! start where first touch puts them), no `move_pages` for `objtier_tier_of`. Events still go
//! into the ring, which is shared memory; the daemon drains it on its own deadlines.
//!
//! Confinement is seen two ways:
//! - **started confined** (the filter came with the exec): `/proc/self/status` says `Seccomp: 1`
//!   or `2`. Read in the library's constructor, when the calls that reads it (`openat`, `read`,
//!   `close`) are surely allowed: the dynamic loader has just made them to load this library.
//! - **confining itself later**: the library interposes `prctl` and `syscall`, through which
//!   glibc programs and libseccomp install a filter, and goes quiet before the filter is in. A
//!   program that installs one with its own inline system call is not seen.
//!
//! Without this, objtier killed every such program: at its first doorbell or link check, or at
//! startup, on the attach's `socket` (host test `sandboxed-programs-live`).

use crate::log;
use core::ffi::{c_int, c_long};
use core::sync::atomic::{AtomicBool, Ordering};

static CONFINED: AtomicBool = AtomicBool::new(false);

/// Whether the program runs under a seccomp filter (see the module's text). Never on a hot
/// path; SeqCst pairs with the daemon link's own flags (`report::quiesce`).
pub fn confined() -> bool {
    CONFINED.load(Ordering::SeqCst)
}

/// The program is about to install a seccomp filter (`how`): from now on no call of our own
/// starts, and those under way in other threads end before the filter is in.
pub fn confine(how: &str) {
    if !CONFINED.swap(true, Ordering::SeqCst) {
        crate::report::quiesce();
        log!("the program installs a seccomp filter ({how}): no more calls to the daemon");
    }
}

/// Reads `/proc/self/status` (once, from the constructor): a program started under a seccomp
/// filter is confined from the start.
pub fn init() {
    if started_confined() {
        CONFINED.store(true, Ordering::SeqCst);
        log!("started under a seccomp filter: not attaching to a daemon");
    }
}

fn started_confined() -> bool {
    let mut buf = [0u8; 4096];
    // SAFETY: open, read into a stack buffer of its length, close; a failure reads as "not
    // confined", as on a system without /proc (nothing else of ours works there either).
    let len = unsafe {
        let fd = crate::os::open(
            c"/proc/self/status".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = crate::os::read(
                fd,
                buf[len..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - len,
            );
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        crate::os::close(fd);
        len
    };
    seccomp_mode(&buf[..len]).is_some_and(|mode| mode != 0)
}

/// The `Seccomp:` field of a `/proc/PID/status` text: 0 none, 1 strict, 2 filter.
fn seccomp_mode(status: &[u8]) -> Option<u32> {
    status
        .split(|&b| b == b'\n')
        .find_map(|line| line.strip_prefix(b"Seccomp:"))
        .and_then(|rest| {
            let digits = rest.trim_ascii();
            core::str::from_utf8(digits).ok()?.parse().ok()
        })
}

/// Whether a `seccomp(2)` call with operation `op` installs a filter (or strict mode); the
/// other operations only ask.
pub fn seccomp_installs(op: c_long) -> bool {
    op == libc::SECCOMP_SET_MODE_STRICT as c_long || op == libc::SECCOMP_SET_MODE_FILTER as c_long
}

/// Makes system call `number` without going through libc's `syscall`, which the library
/// replaces: a negative result becomes -1 with `errno` set, as libc's does.
///
/// # Safety
/// As for the system call itself.
pub unsafe fn raw_syscall(number: c_long, args: [c_long; 6]) -> c_long {
    let ret: c_long;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the Linux x86_64 system call convention; the kernel clobbers rcx and r11.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") number => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the Linux aarch64 system call convention.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") args[0] => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            options(nostack),
        );
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    compile_error!("raw_syscall knows x86_64 and aarch64");
    if (-4095..0).contains(&ret) {
        // SAFETY: errno is this thread's.
        unsafe { crate::os::set_errno(-ret as c_int) };
        return -1;
    }
    ret
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seccomp_field_is_read_from_a_status_text() {
        let status = b"Name:\tsshd\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n";
        assert_eq!(seccomp_mode(status), Some(2));
        assert_eq!(seccomp_mode(b"Name:\tsh\nSeccomp:\t0\n"), Some(0));
        assert_eq!(
            seccomp_mode(b"Name:\tsh\n"),
            None,
            "a kernel without the field"
        );
        // Not confused by the field that only counts filters.
        assert_eq!(seccomp_mode(b"Seccomp_filters:\t3\n"), None);
    }

    #[test]
    fn a_test_process_reads_its_own_status() {
        // The test runner is not confined; the read itself must work.
        assert!(!started_confined());
    }

    #[test]
    fn the_raw_system_call_returns_and_fails_as_libc_does() {
        // SAFETY: getpid and a close of a descriptor that cannot be open.
        unsafe {
            assert_eq!(
                raw_syscall(libc::SYS_getpid, [0; 6]),
                libc::getpid() as c_long
            );
            assert_eq!(raw_syscall(libc::SYS_close, [-7, 0, 0, 0, 0, 0]), -1);
            assert_eq!(*libc::__errno_location(), libc::EBADF);
        }
    }

    #[test]
    fn only_installing_operations_confine() {
        assert!(seccomp_installs(libc::SECCOMP_SET_MODE_FILTER as c_long));
        assert!(seccomp_installs(libc::SECCOMP_SET_MODE_STRICT as c_long));
        assert!(!seccomp_installs(libc::SECCOMP_GET_ACTION_AVAIL as c_long));
    }
}
