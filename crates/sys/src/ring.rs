//! The daemon's mapping of a process's event ring: a memfd the process passed, validated before
//! anything in it is believed.
//!
//! The memory is shared with a process the daemon does not trust, so the memfd must be sealed
//! against shrinking (a ring that shrank under the mapping would fault the daemon), its size must
//! be what the hello claimed, and the header's geometry is validated once
//! ([`objtier_wire::RingHeader::validate`]) and not read again.

use objtier_wire::{Control, Event, RingHeader};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Why a process's ring was refused.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("fstat of the ring memfd failed: {0}")]
    Stat(io::Error),
    #[error(
        "the ring memfd is not sealed against shrinking (F_SEAL_SHRINK); a ring that can shrink \
         under the daemon's mapping is refused"
    )]
    NotSealed,
    #[error("ring memfd is {len} bytes, hello claimed {claimed}")]
    WrongSize { len: usize, claimed: u64 },
    #[error(
        "ring memfd is {len} bytes, more than the largest ring ({max} bytes, {} slots): the \
         library never makes one so large",
        objtier_wire::MAX_RING_CAPACITY
    )]
    TooLarge { len: usize, max: usize },
    #[error("mmap of the ring failed: {0}")]
    Map(io::Error),
    #[error("{0}")]
    Invalid(String),
    /// Creating a ring of our own ([`RingMapping::create`]) failed.
    #[error("{what}: {source}")]
    Create {
        what: &'static str,
        source: io::Error,
    },
}

/// A read-write mapping of a process's ring memfd.
pub struct RingMapping {
    ptr: *mut u8,
    len: usize,
    /// The ring's capacity as validated: the header's field is the process's to scribble on,
    /// and is not read again.
    capacity: u32,
    /// The memfd's device and inode (which ring this is) and owner, as `fstat` gave them.
    file: RingFile,
}

/// Which file a ring is, and whose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFile {
    pub dev: u64,
    pub ino: u64,
    /// The memfd's owner: the effective uid of the process that created it.
    pub uid: u32,
}

// SAFETY: the mapping is plain shared memory; the ring protocol is built from atomics.
unsafe impl Send for RingMapping {}

impl RingMapping {
    /// Maps and validates a ring passed by a process.
    pub fn map(memfd: &OwnedFd, claimed_len: u64) -> Result<RingMapping, RingError> {
        // SAFETY: fstat on an fd we own, into a zeroed stat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(memfd.as_raw_fd(), &mut st) } != 0 {
            return Err(RingError::Stat(io::Error::last_os_error()));
        }
        // SAFETY: F_GET_SEALS on an fd we own.
        let seals = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(RingError::NotSealed);
        }
        let len = st.st_size as usize;
        // Before mapping: a ring announcing 10^9 slots costs nothing to announce.
        let max = objtier_wire::shared_bytes(objtier_wire::MAX_RING_CAPACITY);
        if len > max {
            return Err(RingError::TooLarge { len, max });
        }
        if claimed_len as usize != len || len < std::mem::size_of::<RingHeader>() {
            return Err(RingError::WrongSize {
                len,
                claimed: claimed_len,
            });
        }
        // SAFETY: mapping the whole memfd shared; we validate before interpreting it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(RingError::Map(io::Error::last_os_error()));
        }
        let mut mapping = RingMapping {
            ptr: ptr as *mut u8,
            len,
            capacity: 0,
            file: RingFile {
                dev: st.st_dev,
                ino: st.st_ino,
                uid: st.st_uid,
            },
        };
        mapping.capacity = mapping
            .header()
            .validate(len)
            .map_err(|e| RingError::Invalid(e.to_string()))?;
        Ok(mapping)
    }

    /// A fresh ring of `capacity` events (a power of two) in a sealed memfd, initialised as the
    /// library initialises its own for process `pid`, and mapped: what a daemon has after a
    /// hello, without a process. For tests and benches, which play the library by pushing
    /// events into [`RingMapping::header`].
    pub fn create(capacity: u32, pid: u32) -> Result<RingMapping, RingError> {
        let (memfd, bytes) = RingMapping::create_memfd(capacity, pid)?;
        RingMapping::map(&memfd, bytes)
    }

    /// The sealed, initialised memfd of [`RingMapping::create`] and its size, unmapped (a test
    /// maps it twice, as two processes passing one ring would).
    pub fn create_memfd(capacity: u32, pid: u32) -> Result<(OwnedFd, u64), RingError> {
        let bytes = objtier_wire::shared_bytes(capacity);
        let fail = |what| RingError::Create {
            what,
            source: io::Error::last_os_error(),
        };
        // SAFETY: creating a memfd; the fd is owned at once.
        let fd =
            unsafe { libc::memfd_create(c"objtier-synthetic".as_ptr(), libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(fail("memfd_create"));
        }
        // SAFETY: a fresh fd nobody else owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizing and sealing a memfd we own.
        if unsafe {
            libc::ftruncate(fd, bytes as libc::off_t) != 0
                || libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0
        } {
            return Err(fail("sizing the ring memfd"));
        }
        // SAFETY: a fresh shared mapping of the whole (zeroed) memfd, initialised as the
        // library would, then unmapped; the daemon's own mapping follows.
        unsafe {
            let mem = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                memfd.as_raw_fd(),
                0,
            );
            if mem == libc::MAP_FAILED {
                return Err(fail("mmap of the ring"));
            }
            RingHeader::init(mem as *mut u8, capacity, pid);
            libc::munmap(mem, bytes);
        }
        Ok((memfd, bytes as u64))
    }

    /// The memfd this ring lives in, and its owner.
    pub fn file(&self) -> RingFile {
        self.file
    }

    /// The shared header itself, which the process may write at any time (a test plays a
    /// hostile library through it).
    pub fn as_ptr(&self) -> *mut RingHeader {
        self.ptr as *mut RingHeader
    }

    pub fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is at least a header long and page-aligned; fields are plain
        // integers and atomics, valid for any bit pattern.
        unsafe { &*(self.ptr as *const RingHeader) }
    }

    /// The control area (validated to lie inside the mapping by `map`).
    pub fn control(&self) -> &Control {
        self.header().control_with(self.capacity)
    }

    /// Takes the next event from the ring, showing `taken_back` each allocation the library
    /// took back that it passes over.
    pub fn pop(&self, taken_back: impl FnMut(&Event)) -> Option<Event> {
        self.header().pop_with(self.capacity, taken_back)
    }
}

impl Drop for RingMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_ring_maps_and_an_unsealed_one_is_refused() {
        let ring = RingMapping::create(64, 1234).expect("a ring of our own");
        assert!(ring.pop(|_| {}).is_none());
        // SAFETY: a memfd we own, unsealed.
        let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: the fresh fd is ours.
        let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
        assert!(matches!(
            RingMapping::map(&memfd, 4096),
            Err(RingError::NotSealed)
        ));
    }
}
