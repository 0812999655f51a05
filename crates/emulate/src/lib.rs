//! objtier-emulate: what `objtier profile --source emulate` counts, apart from QEMU.
//!
//! The QEMU plugin (`plugins/emulate`) runs inside the emulated process. It filters every guest
//! load and store through a modeled last-level cache (`objtier-cache-model`), takes the
//! library's events from the emulation channel as they are published
//! (`objtier_wire::emulate`), and hands both to an [`Attribution`]: which object, and so which
//! allocation site, each miss falls on, per 4 KiB page and per interval of the emulated clock.
//! The attribution writes a [`trace`] per process, which the `objtier` command turns into a
//! profile. Everything here is plain logic, tested without QEMU.

pub mod attribution;
pub mod trace;

pub use attribution::Attribution;
