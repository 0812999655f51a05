//! The QEMU side: callbacks registered through the plugin API (not built into unit tests, which
//! cannot link against QEMU's symbols).

use std::ffi::{c_uint, c_void};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::count::{is_user, Counters, KernelPcs, Mark, NodeMap, Totals, OTHER};
use crate::parse_args;
use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::sys::{
    qemu_plugin_cb_flags, qemu_plugin_get_hwaddr, qemu_plugin_hwaddr_is_io,
    qemu_plugin_hwaddr_phys_addr, qemu_plugin_id_t, qemu_plugin_insn_data, qemu_plugin_insn_size,
    qemu_plugin_insn_vaddr, qemu_plugin_mem_is_store, qemu_plugin_mem_rw, qemu_plugin_meminfo_t,
    qemu_plugin_register_atexit_cb, qemu_plugin_register_vcpu_insn_exec_cb,
    qemu_plugin_register_vcpu_mem_cb, qemu_plugin_register_vcpu_tb_trans_cb, qemu_plugin_tb,
    qemu_plugin_tb_get_insn, qemu_plugin_tb_n_insns,
};

struct State {
    map: NodeMap,
    counters: Counters,
    /// The kernel's misses by instruction, for the open window.
    kernel_pcs: KernelPcs,
    counting: AtomicBool,
    out: Mutex<Output>,
}

/// The output file and the open window, if any.
struct Output {
    file: File,
    path: String,
    window: u32,
    open: Option<(Instant, Totals)>,
}

static STATE: OnceLock<State> = OnceLock::new();

impl Output {
    fn line(&mut self, text: &str) {
        // A failed write must not kill the guest; it is reported once per line on QEMU's stderr.
        if let Err(e) = writeln!(self.file, "{text}").and_then(|()| self.file.flush()) {
            eprintln!("objtier-oracle: cannot write to {}: {e}", self.path);
        }
    }

    /// `"window": N, "seconds": S, "nodes": [...]` for the open window as of now.
    fn counts_so_far(&self, state: &State, at: Instant) -> Option<String> {
        let (start, base) = self.open.as_ref()?;
        let counts = state.counters.sum().since(base);
        Some(format!(
            r#""window": {}, "seconds": {:.3}, {}"#,
            self.window,
            at.duration_since(*start).as_secs_f64(),
            counts.json_fields(state.map.nodes())
        ))
    }
}

fn mark(state: &State, mark: Mark) {
    let mut out = state.out.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    match mark {
        Mark::Start => {
            if out.open.is_some() {
                // A start inside a window restarts it (the harness's earlier run died unmarked).
                out.window += 1;
            }
            out.open = Some((now, state.counters.sum()));
            state.kernel_pcs.clear();
            state.counting.store(true, Relaxed);
            let line = format!(r#"{{"event": "start", "window": {}}}"#, out.window);
            out.line(&line);
        }
        Mark::Stop => {
            state.counting.store(false, Relaxed);
            if let Some(fields) = out.counts_so_far(state, now) {
                out.line(&format!(
                    r#"{{"event": "window", "complete": true, {fields}, {}}}"#,
                    state.kernel_pcs.json_field(KERNEL_PCS_LISTED)
                ));
                out.open = None;
                out.window += 1;
            }
        }
    }
}

/// How many of the kernel's instructions with the most misses a window lists.
const KERNEL_PCS_LISTED: usize = 200;

/// `pc` is the address of the instruction making the access (its user data).
unsafe extern "C" fn on_access(
    vcpu: c_uint,
    info: qemu_plugin_meminfo_t,
    vaddr: u64,
    pc: *mut c_void,
) {
    let Some(state) = STATE.get() else { return };
    if !state.counting.load(Relaxed) {
        return;
    }
    // SAFETY: `info` is the callback's own; the hwaddr handle is only used inside it.
    let (slot, store, addr) = unsafe {
        let hw = qemu_plugin_get_hwaddr(info, vaddr);
        let addr = if hw.is_null() {
            vaddr
        } else {
            qemu_plugin_hwaddr_phys_addr(hw)
        };
        let slot = if hw.is_null() || qemu_plugin_hwaddr_is_io(hw) {
            OTHER
        } else {
            state.map.node_of(addr)
        };
        (slot, qemu_plugin_mem_is_store(info), addr)
    };
    let user = is_user(vaddr);
    if state.counters.add(vcpu, slot, store, user, addr) && !user && slot != OTHER {
        state.kernel_pcs.add(vcpu, pc as u64);
    }
}

unsafe extern "C" fn on_marker(_vcpu: c_uint, which: *mut c_void) {
    if let Some(state) = STATE.get() {
        mark(
            state,
            if which as usize == 1 {
                Mark::Start
            } else {
                Mark::Stop
            },
        );
    }
}

unsafe extern "C" fn on_translate(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    // SAFETY: `tb` and its instructions are valid for the duration of this callback.
    unsafe {
        for i in 0..qemu_plugin_tb_n_insns(tb) {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                Some(on_access),
                qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW,
                qemu_plugin_insn_vaddr(insn) as *mut c_void,
            );
            let size = qemu_plugin_insn_size(insn);
            if size == 8 {
                let bytes =
                    std::slice::from_raw_parts(qemu_plugin_insn_data(insn) as *const u8, size);
                if let Some(m) = Mark::decode(bytes) {
                    let which = if m == Mark::Start { 1usize } else { 2 };
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

unsafe extern "C" fn on_exit(_id: qemu_plugin_id_t, _: *mut c_void) {
    let Some(state) = STATE.get() else { return };
    let mut out = state.out.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(fields) = out.counts_so_far(state, Instant::now()) {
        out.line(&format!(
            r#"{{"event": "window", "complete": false, {fields}}}"#
        ));
        out.open = None;
    }
}

/// Writes a snapshot of the open window's counts every `period`.
fn snapshots(period: Duration) {
    loop {
        std::thread::sleep(period);
        let Some(state) = STATE.get() else { return };
        let mut out = state.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fields) = out.counts_so_far(state, Instant::now()) {
            out.line(&format!(r#"{{"event": "snapshot", {fields}}}"#));
        }
    }
}

/// A bad argument stops QEMU before the guest starts, with the reason (returning an error to the
/// crate would abort QEMU with a panic message that names none).
fn fail(why: &str) -> ! {
    eprintln!("objtier-oracle: {why}");
    std::process::exit(1)
}

struct Oracle;

impl HasCallbacks for Oracle {}

impl Register for Oracle {
    /// Registers only what the oracle uses (the crate's default registers every callback kind).
    fn register_default(
        &mut self,
        id: qemu_plugin_id_t,
        args: &Args,
        info: &Info,
    ) -> qemu_plugin::Result<()> {
        let config = parse_args(&args.raw, info.version.current).unwrap_or_else(|e| fail(&e));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&config.out)
            .unwrap_or_else(|e| fail(&format!("cannot open out={}: {e}", config.out)));
        let state = State {
            map: config.map,
            counters: Counters::default(),
            kernel_pcs: KernelPcs::default(),
            counting: AtomicBool::new(false),
            out: Mutex::new(Output {
                file,
                path: config.out,
                window: 0,
                open: None,
            }),
        };
        if STATE.set(state).is_err() {
            fail("loaded twice");
        }
        // SAFETY: plain function pointers with no user data, valid for the plugin's lifetime.
        unsafe {
            qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translate));
            qemu_plugin_register_atexit_cb(id, Some(on_exit), null_mut());
        }
        std::thread::Builder::new()
            .name("oracle-snapshots".into())
            .spawn(move || snapshots(config.period))
            .unwrap_or_else(|e| fail(&format!("cannot start the snapshot thread: {e}")));
        Ok(())
    }
}

qemu_plugin::register!(Oracle);
