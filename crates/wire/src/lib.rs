//! The wire format shared by `libobjtier.so` (the producer) and the objtier daemon (the consumer).
//!
//! Two channels connect a process to the daemon:
//!
//! 1. **A Unix stream socket**, used once per attach: the library connects, sends a fixed-size
//!    [`Hello`] and, as `SCM_RIGHTS` ancillary data, a memfd holding the event ring. The daemon
//!    authenticates the peer with `SO_PEERCRED` (the pid in the hello is only a hint; the kernel's
//!    word wins). The socket then stays open for the life of the process: its hang-up is how the
//!    daemon learns the process is gone, and how the library learns the daemon is gone. After the
//!    hello the library writes only single doorbell bytes ([`RingHeader::doorbell_due`]): each
//!    asks the daemon to drain the ring now, so that the daemon can sleep while the ring is
//!    quiet instead of polling it. The daemon reads and discards them. The same
//!    socket path serves control clients (`objtier status`), which open with [`CONTROL_MAGIC`]
//!    and speak JSON lines.
//! 2. **A shared-memory ring** ([`RingHeader`] followed by `capacity` [`Slot`]s): a bounded
//!    multi-producer, single-consumer queue in the style of Vyukov's bounded MPMC queue. Producers
//!    (application threads) never block: a full ring drops the event and counts it in
//!    [`RingHeader::dropped`]; the daemon then asks for a resync (every live object re-announced,
//!    range by range, between [`EventKind::ResyncBegin`] and [`EventKind::ResyncEnd`]), so a lost
//!    event costs precision for a while, never correctness. A producer may take back an event
//!    the daemon has not consumed yet ([`RingHeader::cancel`]): an object freed while its
//!    allocation still waits in the ring is never heard of, and its free is not sent. The
//!    daemon would have dropped it anyway (an object that dies within an interval never becomes
//!    a record), after reading both events. Zeroed memory is an empty ring: the memfd's pages
//!    are only touched as events fill them.
//! 3. **A control area** ([`Control`]) in the same memfd, after the ring, page-aligned: the way
//!    back, written by the daemon and read lock-free by the library: which NUMA nodes make up
//!    each tier, which tier new objects of a given allocation site should start in (a small
//!    open-addressing table, one writer, readers never wait), and resync requests.
//!
//! Everything here is `#[repr(C)]`, fixed-width and versioned; layout is pinned by compile-time
//! assertions so that a library and a daemon from different builds either agree byte for byte or
//! refuse each other with a clear error. The daemon treats the ring as untrusted input: a process
//! can scribble anything into its own shared memory, and [`RingHeader::validate`] plus per-event
//! checks keep that from hurting anyone but the scribbler. The daemon keeps the capacity it
//! validated and passes it to the `*_with` accessors: the header's field may change later.

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod emulate;

mod control;
mod event;
mod hello;
mod ring;

pub use control::*;
pub use event::*;
pub use hello::*;
pub use ring::*;

/// First eight bytes of a ring and of a [`Hello`]: "OBJTIER1" little-endian.
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"OBJTIER1");
/// First eight bytes a control client sends: "OBJTCTL1".
pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"OBJTCTL1");
/// Bumped on any incompatible change to the ring, the slots or the hello.
pub const WIRE_VERSION: u32 = 4;
/// Page size the wire format assumes for page-granular objects (x86_64, aarch64 4K kernels).
pub const PAGE_SIZE: usize = 4096;
/// Default number of slots in a ring (48 B each: 3 MiB of shared memory, touched as events
/// fill it).
pub const DEFAULT_RING_CAPACITY: u32 = 1 << 16;
/// Largest ring a daemon accepts (guards against a process asking it to map something silly).
pub const MAX_RING_CAPACITY: u32 = 1 << 22;

/// Environment variable naming the daemon's socket; overrides every default.
pub const SOCKET_ENV: &str = "OBJTIER_SOCKET";
/// Socket of a system-wide (root) daemon.
pub const SYSTEM_SOCKET_PATH: &str = "/run/objtier/objtier.sock";
