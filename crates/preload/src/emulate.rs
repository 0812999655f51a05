//! Running inside objtier's emulation (`objtier profile --source emulate`): the library's
//! events go to the QEMU plugin in the same process instead of a daemon.
//!
//! With `OBJTIER_EMULATE=DIR` (the emulation channel, `objtier_wire::emulate`), the
//! constructor maps the plugin's clock and asks for the plugin: it makes `DIR/ring.PID` (a
//! ring as a daemon would get, behind a header page), executes the attach marker, and looks
//! for the plugin's acknowledgement. With it, the process is emulated: event times are the
//! emulated clock, the ring is attached at the first tracked allocation as a daemon's would be
//! (`report::attach`), every event is followed by the drain marker, and there is no socket.
//! Without it the program runs natively (a guest `exec`ed it, and the host ran it): the
//! library leaves `DIR/native.PID` with its executable's path, for `objtier profile` to say
//! which processes the profile does not cover, and reports nothing.
//!
//! A forked child makes a ring of its own at its first attach (the parent's is the parent's).

use crate::options;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use objtier_wire::emulate::{self as channel, ClockPage, Marker, RingFile};
use objtier_wire::{control_flags, RingHeader};

static CLOCK: AtomicPtr<AtomicU64> = AtomicPtr::new(core::ptr::null_mut());
static EMULATED: AtomicBool = AtomicBool::new(false);
/// The process whose ring `RING` is (a forked child makes its own).
static RING_PID: AtomicU32 = AtomicU32::new(0);
static RING: AtomicPtr<RingHeader> = AtomicPtr::new(core::ptr::null_mut());

/// Whether this process runs under the emulation plugin.
#[inline]
pub fn active() -> bool {
    EMULATED.load(Ordering::Relaxed)
}

/// The emulated clock (instructions retired, as ns), when emulated.
#[inline]
pub fn now() -> Option<u64> {
    let clock = CLOCK.load(Ordering::Relaxed);
    // SAFETY: the clock page is mapped once and never unmapped.
    (!clock.is_null()).then(|| unsafe { (*clock).load(Ordering::Relaxed) })
}

/// Asks the plugin to take the events published so far.
#[inline]
pub fn drain() {
    marker(Marker::Drain);
}

#[inline]
fn marker(m: Marker) {
    // SAFETY: both markers are 8-byte NOPs (`nopl DISP(%rax,%rax,1)`): no memory access, no
    // register or flag changed.
    unsafe {
        match m {
            Marker::Attach => core::arch::asm!(
                ".byte 0x0f, 0x1f, 0x84, 0x00, 0x10, 0x00, 0x72, 0x6f",
                options(nostack, preserves_flags)
            ),
            Marker::Drain => core::arch::asm!(
                ".byte 0x0f, 0x1f, 0x84, 0x00, 0x11, 0x00, 0x72, 0x6f",
                options(nostack, preserves_flags)
            ),
        }
    }
}

/// `DIR/NAME<pid>` as a C string in `out`; None if it does not fit.
fn path(out: &mut [u8; options::PLACEMENT_PATH_MAX], name: &[u8], pid: Option<u32>) -> Option<()> {
    let dir = options::get().emulate_dir();
    let mut digits = [0u8; 10];
    let pid: &[u8] = match pid {
        Some(p) => crate::report::decimal(p, &mut digits),
        None => b"",
    };
    crate::report::join(out, &[dir, b"/", name, pid]).map(|_| ())
}

/// Called by the constructor: with `OBJTIER_EMULATE`, maps the clock and makes this process's
/// ring; keeps the clock only if the plugin answered.
pub fn init() {
    if options::get().emulate_dir().is_empty() {
        return;
    }
    let mut clock_path = [0u8; options::PLACEMENT_PATH_MAX];
    if path(&mut clock_path, channel::CLOCK_FILE.as_bytes(), None).is_none() {
        return;
    }
    // SAFETY: opening and mapping a file read-only; the descriptor is closed at once.
    let clock = unsafe {
        let fd = crate::os::open(
            clock_path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let mem = crate::os::mmap(
            core::ptr::null_mut(),
            channel::HEADER_BYTES,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        );
        crate::os::close(fd);
        if mem == libc::MAP_FAILED {
            return;
        }
        &*(mem as *const ClockPage)
    };
    if clock.magic != channel::MAGIC || clock.version != channel::VERSION {
        return;
    }
    if ring().is_some() {
        CLOCK.store(
            &clock.instructions as *const AtomicU64 as *mut AtomicU64,
            Ordering::Relaxed,
        );
    } else {
        note_native();
    }
}

/// This process's ring, made (and acknowledged by the plugin) on first use; None when no
/// plugin answered. Called by the constructor, and by `report::attach` (a forked child's
/// first attach makes its own).
pub fn ring() -> Option<&'static RingHeader> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { crate::os::getpid() } as u32;
    if RING_PID.load(Ordering::Relaxed) == pid {
        let ring = RING.load(Ordering::Acquire);
        // SAFETY: rings are mapped once and never unmapped.
        return (!ring.is_null()).then(|| unsafe { &*ring });
    }
    let ring = make_ring(pid);
    RING.store(
        ring.map_or(core::ptr::null_mut(), |r| {
            r as *const RingHeader as *mut RingHeader
        }),
        Ordering::Release,
    );
    RING_PID.store(pid, Ordering::Relaxed);
    EMULATED.store(ring.is_some(), Ordering::Relaxed);
    ring
}

fn make_ring(pid: u32) -> Option<&'static RingHeader> {
    let capacity = options::get().ring_capacity;
    let bytes = channel::ring_file_bytes(capacity);
    let mut file = [0u8; options::PLACEMENT_PATH_MAX];
    path(&mut file, channel::RING_PREFIX.as_bytes(), Some(pid))?;
    // SAFETY: plain system calls on a file of our own; every failure path closes and unlinks
    // what it made.
    unsafe {
        let name = file.as_ptr() as *const libc::c_char;
        let fd = crate::os::open_mode(
            name,
            libc::O_CREAT | libc::O_TRUNC | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return None;
        }
        let mem = if crate::os::ftruncate(fd, bytes as libc::off_t) == 0 {
            crate::os::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        } else {
            libc::MAP_FAILED
        };
        crate::os::close(fd);
        if mem == libc::MAP_FAILED {
            crate::os::unlink(name);
            return None;
        }
        let header = mem as *mut RingFile;
        (*header).magic = channel::MAGIC;
        (*header).version = channel::VERSION;
        (*header).pid = pid;
        (*header).guest_addr = mem as u64;
        (*header).capacity = capacity;
        let ring = RingHeader::init((mem as *mut u8).add(channel::HEADER_BYTES), capacity, pid);
        // A profile wants every object's lifetime: every free is reported.
        ring.control()
            .flags
            .fetch_or(control_flags::PROFILING, Ordering::Relaxed);
        marker(Marker::Attach);
        if (*header).ack_pid.load(Ordering::Acquire) == pid {
            return Some(ring);
        }
        // No plugin here: this process runs natively.
        crate::os::munmap(mem, bytes);
        crate::os::unlink(name);
        None
    }
}

/// Leaves `DIR/native.PID` holding this process's executable, for `objtier profile` to name.
fn note_native() {
    let mut file = [0u8; options::PLACEMENT_PATH_MAX];
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { crate::os::getpid() } as u32;
    if path(&mut file, channel::NATIVE_PREFIX.as_bytes(), Some(pid)).is_none() {
        return;
    }
    let mut exe = [0u8; 1024];
    // SAFETY: readlink writes at most the buffer's length; open/write/close on our own file.
    unsafe {
        let n = crate::os::readlink(
            c"/proc/self/exe".as_ptr(),
            exe.as_mut_ptr() as *mut libc::c_char,
            exe.len(),
        );
        let fd = crate::os::open_mode(
            file.as_ptr() as *const libc::c_char,
            libc::O_CREAT | libc::O_TRUNC | libc::O_WRONLY | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            if n > 0 {
                crate::os::write(fd, exe.as_ptr() as *const libc::c_void, n as usize);
            }
            crate::os::close(fd);
        }
    }
    crate::log!(
        "not emulated (no objtier plugin answered): this process runs natively, unprofiled"
    );
}
