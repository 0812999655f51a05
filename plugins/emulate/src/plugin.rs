//! The QEMU side: callbacks registered through the plugin API (not built into unit tests, which
//! cannot link against QEMU's symbols).

use std::ffi::{c_uint, c_void};
use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::{parse_args, Config};
use objtier_cache_model::{Cache, Hint};
use objtier_emulate::trace::{Record, Writer};
use objtier_emulate::Attribution;
use objtier_wire::emulate::{self as channel, ClockPage, Marker, RingFile};
use objtier_wire::RingHeader;
use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::sys::{
    qemu_plugin_cb_flags, qemu_plugin_id_t, qemu_plugin_insn_data, qemu_plugin_insn_size,
    qemu_plugin_mem_is_store, qemu_plugin_mem_rw, qemu_plugin_mem_size_shift,
    qemu_plugin_meminfo_t, qemu_plugin_op, qemu_plugin_register_atexit_cb,
    qemu_plugin_register_vcpu_insn_exec_cb, qemu_plugin_register_vcpu_mem_cb,
    qemu_plugin_register_vcpu_syscall_cb, qemu_plugin_register_vcpu_syscall_ret_cb,
    qemu_plugin_register_vcpu_tb_exec_inline, qemu_plugin_register_vcpu_tb_trans_cb,
    qemu_plugin_tb, qemu_plugin_tb_get_insn, qemu_plugin_tb_n_insns,
};

type Trace = Writer<BufWriter<File>>;

struct State {
    dir: PathBuf,
    config: Config,
    cache: Cache,
    clock: &'static AtomicU64,
    /// Where the interval under way ends (a copy of the attribution's, read without its lock).
    next_boundary: AtomicU64,
    inner: Mutex<Inner>,
    /// The library's ring, once it attached; its consumer is whoever holds the lock.
    ring: Mutex<Option<Ring>>,
}

struct Inner {
    pid: u32,
    attribution: Attribution<Trace>,
}

struct Ring {
    header: &'static RingHeader,
    capacity: u32,
}

// SAFETY: the ring lives in a shared mapping that is never unmapped while the plugin runs;
// its consumer side is only used under `State::ring`'s lock.
unsafe impl Send for Ring {}

static STATE: OnceLock<State> = OnceLock::new();

/// The x86-64 system calls the plugin watches.
const SYS_CLONE: i64 = 56;
const SYS_FORK: i64 = 57;
const SYS_VFORK: i64 = 58;
const SYS_EXECVE: i64 = 59;
const SYS_EXECVEAT: i64 = 322;
const SYS_CLONE3: i64 = 435;
const CLONE_THREAD: u64 = 0x0001_0000;

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Stops QEMU before (or while) the program runs, with the reason: a half-made profile must
/// not look like a whole one.
fn fail(why: &str) -> ! {
    eprintln!("objtier-emulate: {why}");
    std::process::exit(125)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn now(&self) -> u64 {
        self.clock.load(Relaxed)
    }

    /// A miss of the modeled cache at `addr`: to the attribution, after ending the intervals
    /// the clock has passed.
    #[cold]
    fn missed(&self, addr: u64, store: bool) {
        let now = self.now();
        let mut inner = lock(&self.inner);
        if now >= self.next_boundary.load(Relaxed) {
            self.advance(&mut inner, now);
        }
        inner.attribution.miss(addr, store, now);
    }

    fn advance(&self, inner: &mut Inner, now: u64) {
        inner.attribution.advance(now);
        self.next_boundary
            .store(inner.attribution.next_boundary(), Relaxed);
        flush(inner);
    }

    fn trace_for(&self, pid: u32) -> Trace {
        trace_for(&self.dir, pid)
    }

    fn start_record(&self, pid: u32, parent: u32) -> Record {
        Record::Start {
            pid,
            parent,
            time: self.now(),
            cache_bytes: self.config.cache_bytes,
            cache_ways: self.config.cache_ways as u32,
        }
    }

    /// The state of the process running now: a fork's child switches to a trace of its own
    /// the first time it gets here.
    fn inner(&self) -> MutexGuard<'_, Inner> {
        let mut inner = lock(&self.inner);
        let now_pid = pid();
        if inner.pid != now_pid {
            let parent = inner.pid;
            let trace = self.trace_for(now_pid);
            // The parent's buffer was flushed before the fork; the child must not write it.
            let parents = inner.attribution.forked(trace);
            std::mem::forget(parents);
            inner.pid = now_pid;
            let start = self.start_record(now_pid, parent);
            inner.attribution.record(start);
            // The parent's ring is the parent's: this process attaches one of its own.
            *lock(&self.ring) = None;
        }
        inner
    }

    /// Writes the process's memory map beside its trace (the library's frames are named with
    /// it), and flushes the trace.
    fn save(&self, inner: &mut Inner) {
        let path = self.dir.join(format!("maps.{}", inner.pid));
        if let Err(e) =
            std::fs::read_to_string("/proc/self/maps").and_then(|maps| std::fs::write(&path, maps))
        {
            eprintln!("objtier-emulate: cannot save {}: {e}", path.display());
        }
        flush(inner);
    }
}

fn trace_for(dir: &Path, pid: u32) -> Trace {
    let path = dir.join(format!("trace.{pid}"));
    let file = File::create(&path)
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", path.display())));
    Writer::new(BufWriter::with_capacity(1 << 20, file))
}

fn flush(inner: &mut Inner) {
    let trace = inner.attribution.sink();
    trace.flush();
    if let Some(e) = trace.error.take() {
        fail(&format!("cannot write the trace of pid {}: {e}", inner.pid));
    }
}

/// The library made `ring.PID`: map it, learn QEMU's guest base from where the guest mapped
/// it, and acknowledge.
fn attach(state: &State) {
    let mut inner = state.inner();
    let pid = inner.pid;
    let path = state.dir.join(format!("{}{pid}", channel::RING_PREFIX));
    let Some((base, len)) = map_shared(&path) else {
        return;
    };
    // SAFETY: the file is at least a header page long (checked by map_shared) and the
    // mapping lives for the rest of the process.
    let file = unsafe { &*(base as *const RingFile) };
    if file.magic != channel::MAGIC || file.version != channel::VERSION {
        eprintln!(
            "objtier-emulate: {} is not an emulation ring of this version: libobjtier.so and \
             the plugin come from different builds",
            path.display()
        );
        return;
    }
    // SAFETY: the ring follows the header page in the same mapping.
    let header = unsafe { &*((base as *const u8).add(channel::HEADER_BYTES) as *const RingHeader) };
    let capacity = match header.validate(len - channel::HEADER_BYTES) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("objtier-emulate: {}: {e}", path.display());
            return;
        }
    };
    let guest_base = guest_base(&path, base as u64, file.guest_addr);
    let now = state.now();
    inner.attribution.attached();
    inner.attribution.record(Record::Attached {
        time: now,
        guest_base,
    });
    *lock(&state.ring) = Some(Ring { header, capacity });
    file.ack_pid.store(pid, Relaxed);
}

/// Maps `path` shared, read-write: (address, length), or None (said on stderr).
fn map_shared(path: &Path) -> Option<(*mut c_void, usize)> {
    let file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("objtier-emulate: cannot open {}: {e}", path.display());
            return None;
        }
    };
    let len = file.metadata().map(|m| m.len() as usize).unwrap_or(0);
    if len < channel::HEADER_BYTES + std::mem::size_of::<RingHeader>() {
        eprintln!("objtier-emulate: {} is too short", path.display());
        return None;
    }
    // SAFETY: mapping a file we opened; the mapping outlives the descriptor.
    let base = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        eprintln!("objtier-emulate: cannot map {}", path.display());
        return None;
    }
    Some((base, len))
}

/// QEMU's guest base: the host address of guest address 0. The ring file is mapped twice in
/// the host's map, by the plugin at `ours` and by the guest at `guest_addr` plus the base.
fn guest_base(path: &Path, ours: u64, guest_addr: u64) -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let name = path.to_string_lossy();
    maps.lines()
        .filter(|l| l.ends_with(name.as_ref()))
        .filter_map(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .find(|&start| start != ours)
        .map_or(0, |start| start.wrapping_sub(guest_addr))
}

/// Takes every event the library has published (on the thread that executed the marker).
fn drain(state: &State) {
    let ring = lock(&state.ring);
    let Some(r) = ring.as_ref() else { return };
    let mut waited = 0u32;
    loop {
        match r.header.pop_with(r.capacity, |_| {}) {
            Some(event) => {
                let now = state.now();
                let mut inner = lock(&state.inner);
                if now >= state.next_boundary.load(Relaxed) {
                    state.advance(&mut inner, now);
                }
                inner.attribution.event(event, now);
                waited = 0;
            }
            // Another thread is writing the next slot: it will be done in a moment.
            None if r.header.backlog() > 0 && waited < 1_000_000 => {
                waited += 1;
                std::hint::spin_loop();
            }
            None => return,
        }
    }
}

/// One access of `size_shift`'s size at `vaddr`: through the modeled cache, a miss to its
/// object.
#[inline(always)]
fn access(vcpu: c_uint, vaddr: u64, info: qemu_plugin_meminfo_t, store: bool) {
    let Some(state) = STATE.get() else { return };
    let line = vaddr >> objtier_cache_model::LINE_SHIFT;
    let missed = state
        .cache
        .touch_line_hinted(line, &HINTS[vcpu as usize % HINTS.len()]);
    // An access that straddles two lines touches both (rare: only unaligned ones).
    if vaddr & 63 > 56 {
        // SAFETY: `info` is this callback's own.
        let size = 1u64 << unsafe { qemu_plugin_mem_size_shift(info) };
        let last = (vaddr + size - 1) >> objtier_cache_model::LINE_SHIFT;
        if last != line && state.cache.touch_line(last) {
            state.missed(last << objtier_cache_model::LINE_SHIFT, store);
        }
    }
    if missed {
        state.missed(vaddr, store);
    }
}

unsafe extern "C" fn on_access(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    vaddr: u64,
    _: *mut c_void,
) {
    // SAFETY: `info` is this callback's own.
    let store = unsafe { qemu_plugin_mem_is_store(info) };
    access(vcpu, vaddr, info, store);
}

/// Each vCPU's (thread's) last line, so that runs of accesses to one line skip the hash
/// (vCPUs past the array share hints, which costs only speed).
static HINTS: [Hint; 256] = [const { Hint::new() }; 256];

unsafe extern "C" fn on_marker(_vcpu: c_uint, which: *mut c_void) {
    let Some(state) = STATE.get() else { return };
    if which as usize == 1 {
        attach(state);
    } else {
        drain(state);
    }
}

unsafe extern "C" fn on_translate(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    // SAFETY: `tb` and its instructions are valid for the duration of this callback.
    unsafe {
        let n = qemu_plugin_tb_n_insns(tb);
        // The clock: an add inlined in the translated code (no call). Threads' adds are not
        // atomic, so with several running at once a few may be lost (docs/design).
        if let Some(state) = STATE.get() {
            qemu_plugin_register_vcpu_tb_exec_inline(
                tb,
                qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64,
                state.clock as *const AtomicU64 as *mut c_void,
                n as u64,
            );
        }
        for i in 0..n {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            // One callback for both, which asks: QEMU 7.2 calls a callback registered for
            // reads alone on writes, and the other way round (seen in the exactness test).
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                Some(on_access),
                qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW,
                null_mut(),
            );
            let size = qemu_plugin_insn_size(insn);
            if size == 8 {
                let bytes =
                    std::slice::from_raw_parts(qemu_plugin_insn_data(insn) as *const u8, size);
                if let Some(m) = Marker::decode(bytes) {
                    let which = if m == Marker::Attach { 1usize } else { 2 };
                    qemu_plugin_register_vcpu_insn_exec_cb(
                        insn,
                        Some(on_marker),
                        qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                        which as *mut c_void,
                    );
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_syscall(
    _id: qemu_plugin_id_t,
    _vcpu: c_uint,
    num: i64,
    a1: u64,
    _a2: u64,
    _a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    let Some(state) = STATE.get() else { return };
    match num {
        // A fork copies the trace's buffer: empty it first, so the child has nothing of the
        // parent's to write.
        SYS_FORK | SYS_VFORK | SYS_CLONE3 => flush(&mut state.inner()),
        SYS_CLONE if a1 & CLONE_THREAD == 0 => flush(&mut state.inner()),
        // The new program runs natively: this process's emulation ends here, unless the exec
        // fails (its trace then goes on).
        SYS_EXECVE | SYS_EXECVEAT => {
            let mut inner = state.inner();
            let now = state.now();
            inner.attribution.record(Record::Exec { time: now });
            state.save(&mut inner);
        }
        _ => {}
    }
}

unsafe extern "C" fn on_syscall_return(_id: qemu_plugin_id_t, _vcpu: c_uint, num: i64, ret: i64) {
    let Some(state) = STATE.get() else { return };
    if ret == 0 && matches!(num, SYS_CLONE | SYS_FORK | SYS_VFORK | SYS_CLONE3) {
        // In a child process, this switches to its own trace (in a new thread, nothing).
        drop(state.inner());
    }
}

unsafe extern "C" fn on_exit(_id: qemu_plugin_id_t, _: *mut c_void) {
    let Some(state) = STATE.get() else { return };
    let mut inner = state.inner();
    let now = state.now();
    inner.attribution.exit(now);
    state.save(&mut inner);
}

/// Creates the clock file and maps it: the emulated clock every process of the command shares.
fn clock(dir: &Path) -> &'static AtomicU64 {
    let path = dir.join(channel::CLOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .and_then(|f| f.set_len(channel::HEADER_BYTES as u64).map(|()| f))
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", path.display())));
    // SAFETY: mapping a file we own, for the life of the process (and its forks).
    let base = unsafe {
        libc::mmap(
            null_mut(),
            channel::HEADER_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if base == libc::MAP_FAILED {
        fail(&format!("cannot map {}", path.display()));
    }
    let page = base as *mut ClockPage;
    // SAFETY: the mapping is a zeroed page, valid for a ClockPage (integers and atomics).
    unsafe {
        (*page).magic = channel::MAGIC;
        (*page).version = channel::VERSION;
        &(*page).instructions
    }
}

struct Plugin;

impl HasCallbacks for Plugin {}

impl Register for Plugin {
    /// Registers only what the plugin uses (the crate's default registers every callback kind).
    fn register_default(
        &mut self,
        id: qemu_plugin_id_t,
        args: &Args,
        _info: &Info,
    ) -> qemu_plugin::Result<()> {
        let config = parse_args(&args.raw).unwrap_or_else(|e| fail(&e));
        let dir = PathBuf::from(&config.dir);
        let cache =
            Cache::with_size(config.cache_bytes, config.cache_ways).unwrap_or_else(|e| fail(&e));
        let clock = clock(&dir);
        let pid = pid();
        let interval_ns = config.interval_ns;
        let attribution = Attribution::new(trace_for(&dir, pid), interval_ns);
        let state = State {
            dir,
            cache,
            clock,
            next_boundary: AtomicU64::new(interval_ns),
            inner: Mutex::new(Inner { pid, attribution }),
            ring: Mutex::new(None),
            config,
        };
        if STATE.set(state).is_err() {
            fail("loaded twice");
        }
        let state = STATE.get().expect("just set");
        {
            let mut inner = lock(&state.inner);
            let start = state.start_record(pid, 0);
            inner.attribution.record(start);
        }
        // SAFETY: plain function pointers with no user data, valid for the plugin's lifetime.
        unsafe {
            qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translate));
            qemu_plugin_register_vcpu_syscall_cb(id, Some(on_syscall));
            qemu_plugin_register_vcpu_syscall_ret_cb(id, Some(on_syscall_return));
            qemu_plugin_register_atexit_cb(id, Some(on_exit), null_mut());
        }
        Ok(())
    }
}

qemu_plugin::register!(Plugin);
