//! The link to the daemon: attach, report, notice when the daemon goes away, re-attach.
//!
//! Attaching is lazy (on the first tracked allocation after the constructor) and retried at most
//! once a second, so a program with no daemon pays one failed `connect` per second of tracked
//! allocation activity and nothing else. An attach creates a fresh ring in a memfd, hands it to
//! the daemon over the socket, re-announces every live object into it (so objects allocated before
//! the attach, before a fork, or before a daemon restart are known), and only then publishes the
//! ring to other threads. An old ring is never unmapped: a thread may still be pushing into it.
//!
//! The daemon answers through the control area of the same memfd: where each tier's nodes are,
//! which tier new objects of a site should start in, and whether it missed events (a full ring
//! drops them) and wants every live object re-announced. That *resync* runs here, on the
//! tick, under the allocator lock of the shard it walks, each step bracketed by `ResyncBegin`/`ResyncEnd` so the
//! daemon knows exactly which objects are live and can forget the rest; a large heap is
//! re-announced in steps that fit the ring.
//!
//! Nothing here blocks: the socket is non-blocking and `MSG_DONTWAIT`, and a full ring drops.

use crate::{large, log, options, site};
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use objtier_wire::{
    control_flags, event_flags, hello_flags, shared_bytes, Control, Event, EventKind, Hello,
    RingHeader, PAGE_SIZE,
};

static RING: AtomicPtr<RingHeader> = AtomicPtr::new(core::ptr::null_mut());
static SOCKET_FD: AtomicI32 = AtomicI32::new(-1);
/// The daemon socket's inode: the program may close our descriptor (a `close_range` or a loop
/// over every fd) and reuse its number for a file or socket of its own, which must then never
/// get a doorbell's byte or have a byte read from it (`socket_is_ours`).
static SOCKET_INODE: AtomicU64 = AtomicU64::new(0);
static NEXT_CHECK_NS: AtomicU64 = AtomicU64::new(0);
static CHECKING: AtomicBool = AtomicBool::new(false);
/// Consecutive failed attach attempts, for back-off and for logging only the first failure.
static FAILURES: AtomicU64 = AtomicU64::new(0);
/// Priority set by `objtier_set_priority`, overriding `OBJTIER_PRIORITY` in later hellos.
static PRIORITY: AtomicI32 = AtomicI32::new(i32::MIN);

const CHECK_INTERVAL_NS: u64 = 1_000_000_000;
const MAX_BACKOFF_NS: u64 = 8_000_000_000;

/// The ring in use, if attached.
#[inline]
pub fn ring() -> Option<&'static RingHeader> {
    let ring = RING.load(Ordering::Acquire);
    // SAFETY: rings are mapped once and never unmapped for the life of the process.
    (!ring.is_null()).then(|| unsafe { &*ring })
}

/// The daemon's control area, if attached.
#[inline]
pub fn control() -> Option<&'static Control> {
    ring().map(RingHeader::control)
}

/// The priority this process announces: `objtier_set_priority`'s, else `OBJTIER_PRIORITY`.
pub fn priority() -> i32 {
    match PRIORITY.load(Ordering::Relaxed) {
        i32::MIN => options::get().priority,
        p => p,
    }
}

/// Records a new priority and tells an attached daemon. False if no daemon heard it now.
pub fn set_priority(priority: i32) -> bool {
    PRIORITY.store(priority, Ordering::Relaxed);
    push_raw(EventKind::Priority, 0, priority as i64 as u64, 0, 0)
}

/// Pushes an event that describes no object; false when not attached or the ring is full.
pub fn push_raw(kind: EventKind, flags: u32, addr: u64, len: u64, site: u64) -> bool {
    ring().is_some_and(|ring| publish(ring, &event(kind, flags, addr, len, now_ns(), site)))
}

/// Describes a site seen for the first time since attaching (`site::first_sighting`): one
/// event per frame.
pub fn describe_site(site: u64, frames: &site::Frames) {
    if site == 0 || frames.len == 0 {
        return;
    }
    let count = frames.len as u64;
    for (index, &ip) in frames.ips[..frames.len].iter().enumerate() {
        push_raw(
            EventKind::SiteFrame,
            0,
            ip as u64,
            (index as u64) << 32 | count,
            site,
        );
    }
}

/// The monotonic clock, at the kernel tick's resolution (1-4 ms): event times, attach checks
/// and resync pacing need no finer, and the coarse clock is a plain read of the vDSO's data,
/// where the precise one reads the TSC and converts (a quarter of a tracked malloc/free pair's
/// cost with a daemon attached, measured with `perf record` on this machine). The same clock
/// as the daemon's `CLOCK_MONOTONIC`, so creation times compare with its own.
#[inline]
pub fn now_ns() -> u64 {
    if let Some(emulated) = crate::emulate::now() {
        return emulated;
    }
    // SAFETY: CLOCK_MONOTONIC_COARSE exists since 2.6.32.
    unsafe { crate::os::clock_ns(libc::CLOCK_MONOTONIC_COARSE) }
}

#[inline]
pub fn push(kind: EventKind, flags: u32, extent: large::Extent, time_ns: u64, site: u64) {
    if let Some(ring) = ring() {
        let (addr, len) = (extent.addr as u64, extent.len as u64);
        publish(ring, &event(kind, flags, addr, len, time_ns, site));
    }
}

/// What `large` keeps for an object whose allocation was deliberately not reported (of a
/// short-lived site, `SiteAdvice::short_lived`): its free is not reported either.
pub const UNREPORTED: u64 = u64::MAX;

/// Reports a new tracked object (`flags`: [`objtier_wire::event_flags`]). Returns what
/// [`push_free`] needs to take the report back (its position in the ring, plus one), or 0 if
/// there was none (not attached, or the ring full).
#[inline]
pub fn push_alloc(extent: large::Extent, time_ns: u64, site: u64, flags: u32) -> u64 {
    let Some(ring) = ring() else { return 0 };
    let (addr, len) = (extent.addr as u64, extent.len as u64);
    let event = event(EventKind::Alloc, flags, addr, len, time_ns, site);
    publish_at(ring, &event).map_or(0, |pos| pos + 1)
}

/// Reports that a tracked object was freed. If its allocation's report (`allocated`, from
/// [`push_alloc`]) still waits in the ring, takes that back instead, and the daemon never hears
/// of the object: it would have dropped an object that lived less than an interval anyway,
/// after reading both events. A program that frees most of its tracked objects soon after
/// allocating them sends a fraction of the events (bench/alloc `xthreads`: four threads). An
/// object whose allocation was not reported ([`UNREPORTED`]) is freed unreported too.
///
/// Called under the lock of the shard that owns the object, as the allocation's report was:
/// no other report about it can come between.
#[inline]
pub fn push_free(extent: large::Extent, allocated: u64, time_ns: u64) {
    let Some(ring) = ring() else { return };
    if allocated == UNREPORTED {
        return;
    }
    // A profiled process reports every free: its profile wants every object's lifetime.
    let profiled = ring.control().has_flag(control_flags::PROFILING);
    if allocated != 0 && !profiled && ring.cancel(allocated - 1) {
        return;
    }
    let (addr, len) = (extent.addr as u64, extent.len as u64);
    publish(ring, &event(EventKind::Free, 0, addr, len, time_ns, 0));
}

/// Pushes `event` into `ring`, ringing the daemon's doorbell when it is due; false if the ring
/// was full (the event is dropped and counted).
#[inline]
fn publish(ring: &RingHeader, event: &Event) -> bool {
    publish_at(ring, event).is_some()
}

/// As [`publish`], returning the position the event took.
#[inline]
fn publish_at(ring: &RingHeader, event: &Event) -> Option<u64> {
    let pos = ring.push_at(event)?;
    // Emulated, the plugin takes each event before the program's next access.
    if ring.doorbell_due(pos) || crate::emulate::active() {
        doorbell();
    }
    Some(pos)
}

/// Doorbells being sent now: a socket number is not closed while one of them may still use it.
static DOORBELLS_IN_FLIGHT: AtomicU32 = AtomicU32::new(0);

/// Asks the daemon to drain the ring now: one byte on the socket, without waiting. A full socket
/// buffer means the daemon has doorbells unread already, so a failure needs no retry.
#[cold]
fn doorbell() {
    if crate::emulate::active() {
        crate::emulate::drain();
        return;
    }
    // Counted before the check: a thread confining the program waits for it (`quiesce`).
    DOORBELLS_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let fd = SOCKET_FD.load(Ordering::SeqCst);
    if fd >= 0 && !crate::sandbox::confined() && socket_is_ours(fd) {
        // SAFETY: sends the one (NUL) byte of a static C string; the socket number cannot be
        // closed and reused before the counter drops (`close_socket`).
        unsafe {
            crate::os::send(
                fd,
                c"".as_ptr() as *const libc::c_void,
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
    }
    DOORBELLS_IN_FLIGHT.fetch_sub(1, Ordering::Release);
}

/// Waits for the daemon-link calls other threads have under way (a doorbell, a link check or
/// attach) to end, for at most a thousand yields: the program is installing a seccomp filter
/// (`sandbox::confine`), which could kill it for one of them, and from now on none starts.
pub fn quiesce() {
    for _ in 0..1000 {
        if DOORBELLS_IN_FLIGHT.load(Ordering::SeqCst) == 0 && !CHECKING.load(Ordering::SeqCst) {
            return;
        }
        // SAFETY: sched_yield has no preconditions (and is made before the filter is in).
        unsafe { crate::os::sched_yield() };
    }
}

/// The inode of the socket `fd` refers to, or 0 if it is not an open socket.
fn socket_inode(fd: i32) -> u64 {
    // SAFETY: fstat writes into our stat buffer; a closed fd is an error, not undefined.
    unsafe {
        let mut st: libc::stat = core::mem::zeroed();
        if crate::os::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return 0;
        }
        st.st_ino as u64
    }
}

/// Whether `fd` is still the socket we connected to the daemon, not a number the program closed
/// and reused. One `fstat`: paid once a second and once per doorbell.
fn socket_is_ours(fd: i32) -> bool {
    let inode = socket_inode(fd);
    inode != 0 && inode == SOCKET_INODE.load(Ordering::Relaxed)
}

/// Closes the daemon socket `fd`, which `SOCKET_FD` no longer holds, once no doorbell may be
/// using its number: closed at once, a number the program reuses (its own socket, say) could get
/// a doorbell's byte. A doorbell takes microseconds; if one is still in flight after a thousand
/// yields (this thread interrupted it, in a signal handler), the socket is left open instead.
fn close_socket(fd: i32) {
    for _ in 0..1000 {
        if DOORBELLS_IN_FLIGHT.load(Ordering::SeqCst) == 0 {
            // SAFETY: closing our own socket, which nothing uses any more.
            unsafe { crate::os::close(fd) };
            return;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { crate::os::sched_yield() };
    }
}

fn event(kind: EventKind, flags: u32, addr: u64, len: u64, time_ns: u64, site: u64) -> Event {
    Event {
        kind: kind as u32,
        flags,
        addr,
        len,
        time_ns,
        site,
    }
}

/// Called on tracked allocations: at most once a second, checks the daemon link and attaches or
/// re-attaches. Cheap when it is not time yet (one atomic load).
#[inline]
pub fn tick(now: u64) {
    if now < NEXT_CHECK_NS.load(Ordering::Relaxed) || !options::ready() {
        return;
    }
    // (SeqCst, as in `quiesce`: either this check sees the program confined, or the thread
    // confining it sees this one checking, and waits.)
    if CHECKING.swap(true, Ordering::SeqCst) {
        return;
    }
    // Confined, no link check and no attach (their calls may kill the program, `sandbox.rs`):
    // only what lives in shared memory.
    let confined = crate::sandbox::confined();
    if let Some(ring) = ring() {
        NEXT_CHECK_NS.store(now + CHECK_INTERVAL_NS, Ordering::Relaxed);
        let fd = SOCKET_FD.load(Ordering::Relaxed);
        if !confined && fd >= 0 && !socket_is_ours(fd) {
            // Its number is the program's now: neither read nor close it.
            SOCKET_FD.store(-1, Ordering::SeqCst);
            detach("the program closed the daemon socket");
            NEXT_CHECK_NS.store(0, Ordering::Relaxed);
        } else if !confined && !crate::emulate::active() && daemon_gone() {
            detach("the daemon closed the connection");
            NEXT_CHECK_NS.store(0, Ordering::Relaxed);
        } else {
            report_new_arenas(ring);
            if resync_if_asked(ring) {
                NEXT_CHECK_NS.store(now + RESYNC_TICK_NS, Ordering::Relaxed);
            }
        }
    } else if options::get().attach && !confined {
        match attach() {
            Ok(()) => {
                FAILURES.store(0, Ordering::Relaxed);
                NEXT_CHECK_NS.store(now + CHECK_INTERVAL_NS, Ordering::Relaxed);
            }
            Err(why) => {
                let failures = FAILURES.fetch_add(1, Ordering::Relaxed);
                if failures == 0 {
                    log!("not attached to a daemon ({why}); the program runs unchanged, retrying");
                }
                let backoff = (CHECK_INTERVAL_NS << failures.min(3)).min(MAX_BACKOFF_NS);
                NEXT_CHECK_NS.store(now + backoff, Ordering::Relaxed);
            }
        }
    } else {
        NEXT_CHECK_NS.store(u64::MAX, Ordering::Relaxed);
    }
    CHECKING.store(false, Ordering::Release);
}

/// mimalloc arenas (ids 1, 2, ...) announced to the daemon on the current connection.
static ARENAS_REPORTED: AtomicI32 = AtomicI32::new(0);

/// Announces the mimalloc arenas reserved since the last call as small-object blocks, so the
/// daemon can tier small objects' memory too. mimalloc takes all its memory from arenas it
/// reserves a large span (64 MiB, growing) at a time, so there are few, and they are never
/// returned.
/// Announces only while the ring is at most half full (else at the next check): a push that
/// fails counts as a dropped event, which would make the daemon ask for a resync, and spoil
/// one under way.
fn report_new_arenas(ring: &RingHeader) {
    let mut reported = ARENAS_REPORTED.load(Ordering::Relaxed);
    let now = now_ns();
    while ring.backlog() <= ring.capacity as u64 / 2 {
        let Some((start, size)) = crate::arenas::arena(reported + 1) else {
            break;
        };
        let start = start as u64;
        let page = PAGE_SIZE as u64;
        // Only whole pages can be tiered.
        let (lo, hi) = (
            start.next_multiple_of(page),
            (start + size as u64) / page * page,
        );
        if hi > lo && !publish(ring, &event(EventKind::BlockMap, 0, lo, hi - lo, now, 0)) {
            break;
        }
        // A placement may put small objects in a tier: the arena's pages not touched yet
        // fault in there (those already resident stay where they are).
        if let Some(nodes) = ring
            .control()
            .small_objects_tier()
            .and_then(|tier| ring.control().tier_nodes(tier))
        {
            large::bind_preferred(start as usize, size, nodes);
        }
        reported += 1;
    }
    ARENAS_REPORTED.store(reported, Ordering::Relaxed);
}

/// The resync request being served and where its walk stands (only touched by the thread
/// that holds `CHECKING`).
static RESYNC_REQUEST: AtomicU64 = AtomicU64::new(0);
static RESYNC_CURSOR: AtomicU64 = AtomicU64::new(0);
/// While a resync is under way, ticks come this often instead of once a second.
const RESYNC_TICK_NS: u64 = 10_000_000;

/// Re-announces every live object if the daemon asked (it saw dropped events), in steps that
/// fit the ring: each step covers an address range bracketed by `ResyncBegin`/`ResyncEnd`, and
/// steps continue only while the ring is at most half full, so a resync never drops its own
/// events for lack of room and never holds an allocator lock for long. Returns true while a
/// resync is under way.
fn resync_if_asked(ring: &RingHeader) -> bool {
    let control = ring.control();
    let request = control.resync_request.load(Ordering::Acquire);
    if request == control.resync_served.load(Ordering::Relaxed) {
        return false;
    }
    if RESYNC_REQUEST.swap(request as u64, Ordering::Relaxed) != request as u64 {
        RESYNC_CURSOR.store(0, Ordering::Relaxed); // a new request starts from the beginning
    }
    let capacity = ring.capacity as u64;
    let step_objects = (capacity / 4).max(1) as usize;
    let now = now_ns();
    let marker = |kind, addr: usize| event(kind, 0, addr as u64, request as u64, now, 0);
    while ring.backlog() <= capacity / 2 {
        let packed = RESYNC_CURSOR.load(Ordering::Relaxed);
        let cursor = ((packed >> 32) as usize, (packed & 0xffff_ffff) as usize);
        // Under the lock of the shard that owns the step's range: no allocation or free there
        // by another thread can land between a step's Begin and End, so the daemon may take
        // each step as the complete truth.
        let next = large::snapshot_step(
            cursor,
            step_objects,
            |lo| {
                publish(ring, &marker(EventKind::ResyncBegin, lo));
            },
            |extent, site| {
                publish(ring, &snapshot_event(extent, site, now));
            },
            |hi| {
                publish(ring, &marker(EventKind::ResyncEnd, hi));
            },
        );
        match next {
            Some((chunk, page)) => {
                RESYNC_CURSOR.store((chunk as u64) << 32 | page as u64, Ordering::Relaxed)
            }
            None => {
                control.resync_served.store(request, Ordering::Release);
                log!("re-announced live objects (resync {request})");
                return false;
            }
        }
    }
    true
}

fn snapshot_event(extent: large::Extent, site: u64, now: u64) -> Event {
    let (addr, len) = (extent.addr as u64, extent.len as u64);
    event(
        EventKind::Alloc,
        event_flags::SNAPSHOT,
        addr,
        len,
        now,
        site,
    )
}

fn daemon_gone() -> bool {
    let fd = SOCKET_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return true;
    }
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: polls one fd we own, without waiting.
    let n = unsafe { crate::os::poll(&mut pfd, 1, 0) };
    if n <= 0 {
        return false;
    }
    if pfd.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return true;
    }
    // The daemon may send bytes in future versions; drain them, and treat EOF as gone.
    let mut buf = [0u8; 64];
    // SAFETY: reads into a stack buffer of the given length.
    let got = unsafe {
        crate::os::recv(
            fd,
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    got == 0
}

fn detach(why: &str) {
    RING.store(core::ptr::null_mut(), Ordering::Release);
    let fd = SOCKET_FD.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        close_socket(fd);
    }
    log!("detached: {why}");
}

/// Connects to the daemon and hands it a fresh ring (or, emulated, takes the plugin's).
/// Returns a static reason on failure.
fn attach() -> Result<(), &'static str> {
    let opts = options::get();
    if !opts.emulate_dir().is_empty() {
        let ring = crate::emulate::ring().ok_or("not emulated: no objtier plugin answered")?;
        adopt(ring, -1);
        return Ok(());
    }
    let fd = connect_any(opts)?;
    let capacity = opts.ring_capacity;
    let bytes = shared_bytes(capacity);
    // SAFETY: plain syscalls on fds we own; every failure path closes what it opened.
    unsafe {
        let memfd = crate::os::memfd_create(
            c"objtier-ring".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        );
        if memfd < 0 {
            crate::os::close(fd);
            return Err("memfd_create failed");
        }
        // Sealed at its size: the daemon refuses rings that could shrink under its mapping
        // (a shrunk memfd would turn the daemon's next read into SIGBUS).
        if crate::os::ftruncate(memfd, bytes as libc::off_t) != 0
            || crate::os::add_seals(
                memfd,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ) != 0
        {
            crate::os::close(memfd);
            crate::os::close(fd);
            return Err("cannot size and seal the ring memfd");
        }
        let mem = crate::os::mmap(
            core::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd,
            0,
        );
        if mem == libc::MAP_FAILED {
            crate::os::close(memfd);
            crate::os::close(fd);
            return Err("mmap of the ring failed");
        }
        let pid = crate::os::getpid() as u32;
        let ring = RingHeader::init(mem as *mut u8, capacity, pid);
        // The placement file, opened here with the program's own rights: the daemon reads
        // what the program may read, and nothing else.
        let placement = if opts.has_placement() {
            crate::os::open(
                opts.placement_path.as_ptr() as *const libc::c_char,
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        } else {
            -1
        };
        if opts.has_placement() && placement < 0 {
            log!("cannot open the placement file (OBJTIER_PLACEMENT): running without it");
        }
        let mut flags = 0;
        if opts.no_migrate {
            flags |= hello_flags::NO_MIGRATE;
        }
        if placement >= 0 {
            flags |= hello_flags::PLACEMENT;
        }
        let hello = Hello {
            magic: objtier_wire::RING_MAGIC,
            version: objtier_wire::WIRE_VERSION,
            kind: objtier_wire::hello_kind::PRELOAD,
            pid,
            priority: priority(),
            fast_capacity_bytes: opts.fast_capacity_bytes,
            shared_bytes: bytes as u64,
            track_min_bytes: opts.track_min_bytes as u64,
            profile_token: opts.profile_token,
            flags,
        };
        let fds = [memfd, placement];
        let sent = send_with_fds(
            fd,
            hello.as_bytes(),
            &fds[..if placement >= 0 { 2 } else { 1 }],
        );
        crate::os::close(memfd);
        if placement >= 0 {
            crate::os::close(placement);
        }
        if !sent {
            crate::os::munmap(mem, bytes);
            crate::os::close(fd);
            return Err("could not send the hello to the daemon");
        }
        if placement >= 0 {
            await_placement(ring.control());
        }
        crate::budget::reset();
        // The socket stays open for the life of the process: keep it out of the low numbers a
        // program closes, reopens (fds 0-2) or counts, like other long-lived library fds.
        let fd = move_fd_high(fd);
        SOCKET_INODE.store(socket_inode(fd), Ordering::Relaxed);
        adopt(ring, fd);
    }
    log!("attached to the daemon");
    Ok(())
}

/// Makes `ring` (with the daemon socket `fd`, or -1 for none) the one in use: every live
/// object re-announced into it first.
fn adopt(new: &'static RingHeader, fd: i32) {
    // Re-announce live objects, then publish the ring, under one hold of the allocator lock:
    // no allocation or free can fall between the snapshot and the switch. The new daemon knows
    // none of our sites: describe each again when next seen.
    let now = now_ns();
    site::forget_all();
    large::for_each_live(
        |extent, site| {
            new.push(&snapshot_event(extent, site, now));
        },
        || {
            let old = SOCKET_FD.swap(fd, Ordering::SeqCst);
            if old >= 0 {
                close_socket(old);
            }
            RING.store(
                new as *const RingHeader as *mut RingHeader,
                Ordering::Release,
            );
        },
    );
    // The snapshot may have been pushed after the daemon's first look at the ring.
    doorbell();
    ARENAS_REPORTED.store(0, Ordering::Relaxed);
    if let Some(ring) = ring() {
        report_new_arenas(ring);
    }
}

/// How long an attach with a placement waits for the daemon to apply it.
const PLACEMENT_WAIT_NS: u64 = 1_000_000_000;

/// Waits (at most [`PLACEMENT_WAIT_NS`]) until the daemon has published the tiers, which it does
/// after writing the placement into the control area: the objects allocated next, the
/// program's first, are born in their tier. A daemon busy with a long migration step answers
/// later; the program then goes on, and the placement applies from when it does.
fn await_placement(control: &Control) {
    let start = now_ns();
    while control.tier_count.load(Ordering::Acquire) == 0 {
        if now_ns().saturating_sub(start) > PLACEMENT_WAIT_NS {
            log!("the daemon has not applied the placement within a second: going on without it for now");
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        // SAFETY: nanosleep with a valid timespec and no remainder.
        unsafe { crate::os::nanosleep(&pause) };
    }
}

/// Lowest descriptor number the daemon socket moves to (when the fd limit allows).
const HIGH_FD: i32 = 1000;

/// Moves `fd` to a number at or above `HIGH_FD` (close-on-exec), or leaves it if it cannot.
fn move_fd_high(fd: i32) -> i32 {
    // SAFETY: duplicating and closing a descriptor we own.
    unsafe {
        let high = crate::os::dup_cloexec_from(fd, HIGH_FD);
        if high < 0 {
            return fd;
        }
        crate::os::close(fd);
        high
    }
}

/// Tries `OBJTIER_SOCKET`, else the per-user socket, else the system one.
fn connect_any(opts: &options::Options) -> Result<i32, &'static str> {
    let mut path = [0u8; options::SOCKET_PATH_MAX];
    if opts.socket_path[0] != 0 {
        return connect_path(&opts.socket_path);
    }
    // SAFETY: geteuid has no failure mode.
    let uid = unsafe { crate::os::geteuid() };
    if uid != 0 {
        let len = if opts.runtime_dir[0] != 0 {
            join(
                &mut path,
                &[cstr(&opts.runtime_dir), b"/objtier/objtier.sock"],
            )
        } else {
            let mut digits = [0u8; 10];
            join(
                &mut path,
                &[
                    b"/tmp/objtier-",
                    decimal(uid, &mut digits),
                    b"/objtier.sock",
                ],
            )
        };
        if len.is_some() {
            if let Ok(fd) = connect_path(&path) {
                return Ok(fd);
            }
        }
    }
    let len = join(&mut path, &[objtier_wire::SYSTEM_SOCKET_PATH.as_bytes()]);
    if len.is_none() {
        return Err("socket path too long");
    }
    connect_path(&path)
}

fn cstr(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

/// `n` in decimal, written at the end of `out`, without allocating.
pub(crate) fn decimal(mut n: u32, out: &mut [u8; 10]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &out[i..];
        }
    }
}

/// Writes the concatenation of `parts` plus a NUL into `out`; None if it does not fit.
/// `parts` one after the other as a C string in `out`: its length, or None if it does not fit.
pub(crate) fn join(out: &mut [u8], parts: &[&[u8]]) -> Option<usize> {
    let mut len = 0;
    for part in parts {
        if len + part.len() >= out.len() {
            return None;
        }
        out[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    out[len] = 0;
    Some(len)
}

fn connect_path(path: &[u8; options::SOCKET_PATH_MAX]) -> Result<i32, &'static str> {
    // SAFETY: socket/connect on a sockaddr_un we fill within bounds; the fd is closed on error.
    unsafe {
        let fd = crate::os::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if fd < 0 {
            return Err("socket() failed");
        }
        let mut addr: libc::sockaddr_un = core::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let path = cstr(path);
        for (dst, &src) in addr.sun_path.iter_mut().zip(path) {
            *dst = src as libc::c_char;
        }
        let len = core::mem::size_of::<libc::sa_family_t>() + path.len() + 1;
        if crate::os::connect(fd, &addr as *const _ as *const libc::sockaddr, len as u32) != 0 {
            crate::os::close(fd);
            return Err("no daemon is listening on the socket");
        }
        Ok(fd)
    }
}

/// Sends `bytes` with `fds` (one or two) attached as SCM_RIGHTS, without blocking or raising
/// SIGPIPE.
///
/// # Safety
/// `socket` and every one of `fds` must be open file descriptors.
unsafe fn send_with_fds(socket: i32, bytes: &[u8], fds: &[i32]) -> bool {
    // A u64 array keeps the control buffer aligned for cmsghdr.
    let mut control = [0u64; 4];
    let fds = &fds[..fds.len().min(2)];
    let fds_bytes = core::mem::size_of_val(fds) as u32;
    // SAFETY: the msghdr points at live stack buffers sized by CMSG_SPACE for the fds.
    unsafe {
        let space = libc::CMSG_SPACE(fds_bytes) as usize;
        debug_assert!(space <= core::mem::size_of_val(&control));
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut libc::c_void,
            iov_len: bytes.len(),
        };
        let mut msg: libc::msghdr = core::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_bytes) as usize;
        for (i, &fd) in fds.iter().enumerate() {
            core::ptr::write_unaligned((libc::CMSG_DATA(cmsg) as *mut i32).add(i), fd);
        }
        let sent = crate::os::sendmsg(socket, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL);
        sent == bytes.len() as isize
    }
}

/// `pthread_atfork` child handler: the child is a new process and must attach on its own; the
/// inherited ring belongs to the parent.
pub fn after_fork_child() {
    RING.store(core::ptr::null_mut(), Ordering::Relaxed);
    // The parent's other threads, which may have been ringing, do not exist here.
    DOORBELLS_IN_FLIGHT.store(0, Ordering::Relaxed);
    let fd = SOCKET_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: closing the child's copy of the parent's socket leaves the parent's open.
        unsafe { crate::os::close(fd) };
    }
    NEXT_CHECK_NS.store(0, Ordering::Relaxed);
    FAILURES.store(0, Ordering::Relaxed);
    CHECKING.store(false, Ordering::Relaxed);
    ARENAS_REPORTED.store(0, Ordering::Relaxed);
}
