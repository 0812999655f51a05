//! The hello: the fixed-size message a library sends once per attach, with its ring's memfd.

use crate::{WireError, RING_MAGIC, WIRE_VERSION};
use core::mem::size_of;

/// What kind of client opened the connection.
pub mod hello_kind {
    /// A process running libobjtier.so, attaching its ring.
    pub const PRELOAD: u32 = 1;
}

/// Sent once by the library right after connecting, with the ring memfd as `SCM_RIGHTS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hello {
    pub magic: u64,
    pub version: u32,
    pub kind: u32,
    /// The sender's idea of its pid (the daemon uses `SO_PEERCRED` instead).
    pub pid: u32,
    /// Application priority (`OBJTIER_PRIORITY`); higher wins the fast tier. 0 is the default.
    pub priority: i32,
    /// Cap on fast-tier bytes for this process (`OBJTIER_FAST_CAPACITY`); 0 means no cap.
    pub fast_capacity_bytes: u64,
    /// Bytes of the memfd the daemon should map ([`shared_bytes`](crate::shared_bytes)).
    pub shared_bytes: u64,
    /// Objects at least this large are tracked (`OBJTIER_TRACK_MIN`).
    pub track_min_bytes: u64,
    /// The profile session this process belongs to (`OBJTIER_PROFILE`, from `objtier
    /// profile`); 0 for none.
    pub profile_token: u64,
    /// [`hello_flags`].
    pub flags: u64,
}

/// Bits of [`Hello::flags`].
pub mod hello_flags {
    /// The daemon must never move this process's pages (`objtier run --no-migrate`, `objtier
    /// profile --observe-only`): it places new objects only, as the process's placement says.
    pub const NO_MIGRATE: u64 = 1 << 0;
    /// A second descriptor follows the ring's in the hello's `SCM_RIGHTS`: the placement file
    /// (`OBJTIER_PLACEMENT`), opened by the process, which the daemon reads and applies.
    pub const PLACEMENT: u64 = 1 << 1;
    /// Every flag this build knows; a hello with others is refused.
    pub const ALL: u64 = NO_MIGRATE | PLACEMENT;
}

impl Hello {
    pub fn as_bytes(&self) -> &[u8; size_of::<Hello>()] {
        // SAFETY: Hello is repr(C), has no padding (asserted size 64 = sum of fields) and is
        // plain old data.
        unsafe { &*(self as *const Hello as *const [u8; size_of::<Hello>()]) }
    }

    pub fn from_bytes(bytes: &[u8; size_of::<Hello>()]) -> Result<Hello, WireError> {
        // SAFETY: any 64 bytes form a valid Hello (integers only); read_unaligned copes with
        // the buffer's alignment.
        let hello = unsafe { core::ptr::read_unaligned(bytes.as_ptr() as *const Hello) };
        if hello.magic != RING_MAGIC {
            return Err(WireError::BadMagic);
        }
        if hello.version != WIRE_VERSION {
            return Err(WireError::VersionMismatch {
                ours: WIRE_VERSION,
                theirs: hello.version,
            });
        }
        Ok(hello)
    }
}

/// Size of a [`Hello`] on the wire.
pub const HELLO_BYTES: usize = size_of::<Hello>();
