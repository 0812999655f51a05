//! objtier's kernel plumbing: everything that reads from or writes to the kernel.
//!
//! - [`topology`]: NUMA nodes and memory tiers from sysfs (every reader takes a root path, so
//!   tests feed it captured kernel text).
//! - [`pages`]: `move_pages(2)` behind the [`pages::PageMover`] trait, with a recording fake so
//!   planners and daemons can be tested on any laptop, and `--dry-run` comes for free.
//! - [`damon`]: the DAMON sysfs interface behind a file layer with a dry-run mode.
//! - [`mempolicy`]: the calling thread's memory policy, which programs it starts inherit.
//! - [`maps`]: `/proc/PID/maps`, to name code addresses as `module+offset`.
//! - [`elf`]: a module file's build-id, and where a file offset is mapped.
//! - [`procrefs`]: page references through `/proc` (`clear_refs`, `smaps`, `pagemap`) and idle
//!   page tracking, with a recording fake, for the access source of kernels without DAMON.
//! - [`perf`]: hardware counters (LLC misses, instructions) through `perf_event_open(2)`.
//! - [`socket`]: peer credentials and fd passing on Unix sockets.
//! - [`ring`]: the daemon's validated mapping of a process's event ring (a sealed memfd).
//! - [`probe`]: read-only checks of what the machine offers, for `objtier doctor`.
//!
//! Policy lives elsewhere (`objtier-policy`); nothing here decides anything.

pub mod damon;
pub mod elf;
pub mod maps;
pub mod mempolicy;
pub mod pagemap;
pub mod pages;
pub mod perf;
pub mod probe;
pub mod procrefs;
pub mod ring;
pub mod socket;
pub mod topology;

pub use objtier_wire::PAGE_SIZE;
