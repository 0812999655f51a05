//! The emulation channel: how `libobjtier.so`, running inside a program that QEMU emulates
//! (`objtier profile --source emulate`), talks to objtier's QEMU plugin in the same process.
//!
//! `objtier profile` makes a directory and gives its path to both: to the plugin as an argument
//! and to the library as `OBJTIER_EMULATE`. In it:
//!
//! - **`clock`** ([`ClockPage`]), made by the plugin: the emulated clock, the instructions every
//!   emulated thread of every process of the command has retired so far, which the plugin adds
//!   to as each translated block starts. The library maps it read-only and stamps its events
//!   with it instead of `CLOCK_MONOTONIC` (one instruction is one nanosecond, as the tiered VM's
//!   virtual time at `--icount 0`), so that lifetimes and intervals are the program's own work
//!   whatever the host's speed, and each object's misses fall between its own events.
//! - **`ring.PID`** ([`RingFile`]), made by the library of process PID: a page of header, then
//!   the same ring and control area a daemon would get ([`crate::shared_bytes`]). The plugin is
//!   its consumer. After creating it the library executes the [`Marker::Attach`] instruction; a
//!   plugin in the process maps the file and acknowledges in [`RingFile::ack_pid`]. A process
//!   that sees no acknowledgement is not emulated (a program that a guest `exec`ed runs
//!   natively, outside QEMU): it leaves **`native.PID`** (its executable's path) and reports
//!   nothing. After each event it publishes, the library executes [`Marker::Drain`], and the
//!   plugin takes the ring's events there and then, on the thread that published them: an
//!   object is known before the program's next access to it.
//!
//! Markers are 8-byte NOPs, `nopl DISP(%rax,%rax,1)`, whose displacement carries a tag no
//! compiler emits (the same encoding as the evaluation's oracle, `bench/oracle/mark.c`): harmless
//! where no plugin looks, and found by the plugin when it translates the instruction.

use core::sync::atomic::{AtomicU32, AtomicU64};

/// The environment variable that gives the library the channel's directory.
pub const ENV: &str = "OBJTIER_EMULATE";
/// The clock file's name in the channel directory.
pub const CLOCK_FILE: &str = "clock";
/// Prefix of a process's ring file (`ring.PID`).
pub const RING_PREFIX: &str = "ring.";
/// Prefix of the note a process that runs natively leaves (`native.PID`).
pub const NATIVE_PREFIX: &str = "native.";
/// First eight bytes of the clock page and of a ring file's header: "OBJTEMU1".
pub const MAGIC: u64 = u64::from_le_bytes(*b"OBJTEMU1");
/// Bumped on any incompatible change to the channel.
pub const VERSION: u32 = 1;
/// Bytes of the clock file and of a ring file's header.
pub const HEADER_BYTES: usize = 4096;

/// The clock file.
#[repr(C, align(64))]
pub struct ClockPage {
    pub magic: u64,
    pub version: u32,
    _pad0: [u8; 52],
    /// Instructions retired by every emulated thread so far: the emulated clock, in ns.
    pub instructions: AtomicU64,
    _pad1: [u8; 56],
}

/// The header page of a ring file; the wire ring follows at [`HEADER_BYTES`].
#[repr(C, align(64))]
pub struct RingFile {
    pub magic: u64,
    pub version: u32,
    /// The process that made the file.
    pub pid: u32,
    /// Where the library mapped the file, in the guest's addresses: the plugin finds its own
    /// mapping and the guest's in the host's map and so learns QEMU's guest base.
    pub guest_addr: u64,
    /// The ring's capacity (slots).
    pub capacity: u32,
    /// Written by the plugin once it consumes the ring: the pid it runs in.
    pub ack_pid: AtomicU32,
    _pad: [u8; 32],
}

const _: () = {
    assert!(core::mem::size_of::<ClockPage>() == 128);
    assert!(core::mem::size_of::<RingFile>() == 64);
};

/// Bytes of a ring file for a ring of `capacity` slots.
pub const fn ring_file_bytes(capacity: u32) -> usize {
    HEADER_BYTES + crate::shared_bytes(capacity)
}

/// The markers the library executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// A ring file `ring.PID` is ready: map it and acknowledge.
    Attach,
    /// Events were published: take them now.
    Drain,
}

/// The marker prefix: `nopl DISP32(%rax,%rax,1)`.
pub const MARKER_PREFIX: [u8; 4] = [0x0f, 0x1f, 0x84, 0x00];
/// The high 16 bits of a marker's displacement (the oracle's).
pub const MARKER_TAG: u16 = 0x6f72;
/// The low 16 bits for [`Marker::Attach`] and [`Marker::Drain`] (the oracle uses 1 and 2).
pub const MARK_ATTACH: u16 = 0x10;
pub const MARK_DRAIN: u16 = 0x11;

impl Marker {
    /// The 8 bytes of the instruction.
    pub const fn bytes(self) -> [u8; 8] {
        let op = match self {
            Marker::Attach => MARK_ATTACH,
            Marker::Drain => MARK_DRAIN,
        };
        let [lo, hi] = op.to_le_bytes();
        let [tlo, thi] = MARKER_TAG.to_le_bytes();
        [
            MARKER_PREFIX[0],
            MARKER_PREFIX[1],
            MARKER_PREFIX[2],
            MARKER_PREFIX[3],
            lo,
            hi,
            tlo,
            thi,
        ]
    }

    /// The marker an instruction's bytes encode, if any.
    pub fn decode(insn: &[u8]) -> Option<Marker> {
        if insn.len() != 8 || insn[..4] != MARKER_PREFIX {
            return None;
        }
        let disp = u32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]);
        if (disp >> 16) as u16 != MARKER_TAG {
            return None;
        }
        match disp as u16 {
            MARK_ATTACH => Some(Marker::Attach),
            MARK_DRAIN => Some(Marker::Drain),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_others_do_not_decode() {
        for m in [Marker::Attach, Marker::Drain] {
            assert_eq!(Marker::decode(&m.bytes()), Some(m));
        }
        assert_eq!(
            Marker::Drain.bytes(),
            [0x0f, 0x1f, 0x84, 0x00, 0x11, 0x00, 0x72, 0x6f]
        );
        // The oracle's start marker and an assembler's padding NOP are not ours.
        assert_eq!(
            Marker::decode(&[0x0f, 0x1f, 0x84, 0x00, 0x01, 0x00, 0x72, 0x6f]),
            None
        );
        assert_eq!(Marker::decode(&[0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0]), None);
        assert_eq!(Marker::decode(&Marker::Drain.bytes()[..7]), None);
    }
}
