//! One entry per decoder of untrusted input, for the fuzz targets (`fuzz/`, run by
//! `bench/fuzz/run`) and for the tests that replay their saved corpus (`tests/fuzz_corpus.rs`).
//! Each takes any bytes and must return without panicking, hanging or allocating without bound.

use crate::daemon::Daemon;
use crate::process::Process;
use objtier_sys::socket::PeerCred;
use objtier_wire::{Event, Hello, HELLO_BYTES};
use std::path::Path;

/// Ring slots and events as the daemon drains them: the first byte chooses between events
/// pushed as the library pushes them (48-byte records: kind, flags, addr, len, time, site) and
/// raw bytes written over the ring, its header and control area, as a hostile process may.
pub fn ring(data: &[u8]) {
    let Ok((mut p, _peer)) = Process::synthetic(1, 1, 64, 1 << 20) else {
        return;
    };
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        for chunk in rest.chunks_exact(48) {
            let word =
                |i: usize| u64::from_le_bytes(chunk[i..i + 8].try_into().unwrap_or_default());
            let event = Event {
                kind: word(0) as u32,
                flags: (word(0) >> 32) as u32,
                addr: word(8),
                len: word(16),
                time_ns: word(24),
                site: word(32),
            };
            if !p.ring.header().push(&event) {
                p.drain();
                p.ring.header().push(&event);
            }
        }
    } else {
        let len = objtier_wire::shared_bytes(64).min(rest.len());
        // SAFETY: the mapping is at least shared_bytes(64) long; the process may write any byte
        // of it at any time, which is what this plays.
        unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), p.ring.as_ptr() as *mut u8, len) };
    }
    p.drain();
    p.commit_pending(1 << 40);
    p.judge_sites();
    p.judge_early(1 << 41);
}

/// A hello as the daemon decodes it.
pub fn hello(data: &[u8]) {
    if let Ok(bytes) = <[u8; HELLO_BYTES]>::try_from(data.get(..HELLO_BYTES).unwrap_or_default()) {
        let _ = Hello::from_bytes(&bytes);
    }
}

thread_local! {
    static CONTROL: std::cell::RefCell<Option<Daemon>> =
        const { std::cell::RefCell::new(None) };
}

/// A control request line, answered as to a non-root user (the first byte's low bit: root) by
/// a daemon with one attached process of that user.
pub fn control(data: &[u8]) {
    let Some((&who, line)) = data.split_first() else {
        return;
    };
    CONTROL.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            // Nothing under these: a request reads no real process's files.
            let nowhere = Path::new("/nonexistent/objtier-fuzz");
            let mut config = crate::config::DaemonConfig::new(nowhere.join("sock"));
            config.sys_root = nowhere.to_owned();
            config.proc_root = nowhere.join("proc");
            config.warm_start = false;
            let mut d = Daemon::on_fake_kernel(
                config,
                objtier_sys::topology::Topology::two_tiers(1 << 30, 1 << 30, 1 << 32),
            );
            if let Ok((mut p, peer)) = Process::synthetic(1, 100, 64, 1 << 20) {
                p.uid = 1000;
                std::mem::forget(peer); // the process stays attached
                d.processes.insert(1, p);
            }
            *cell = Some(d);
        }
        let Some(d) = cell.as_mut() else { return };
        let peer = Ok(PeerCred {
            pid: 100,
            uid: if who & 1 == 1 { 0 } else { 1000 },
            gid: 1000,
        });
        let _ = d.answer(&String::from_utf8_lossy(line), &peer);
    });
}

/// A site-store file's text.
pub fn site_store(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::sitestore::parse(text);
    }
}

/// A profile file (`objtier profile`'s output).
pub fn profile(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = objtier_profile::Profile::from_json(Path::new("fuzz.json"), text);
    }
}

/// A placement file (`objtier advise`'s output).
pub fn placement(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = objtier_profile::Placement::from_json(Path::new("fuzz.json"), text);
    }
}

/// A decoder driven by a fuzz target.
pub type Target = fn(&[u8]);

/// The targets by name, as `fuzz/` and the corpus replay know them.
pub const TARGETS: &[(&str, Target)] = &[
    ("ring", ring),
    ("hello", hello),
    ("control", control),
    ("site_store", site_store),
    ("profile", profile),
    ("placement", placement),
];
