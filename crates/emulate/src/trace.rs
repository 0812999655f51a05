//! The trace the plugin writes for each emulated process (`trace.PID` in the channel directory)
//! and the `objtier` command reads: fixed-size little-endian records, in the order the plugin
//! made them.
//!
//! A trace starts with [`Record::Start`] and, when the process exited under the emulation,
//! ends with [`Record::Exit`]; one that ends otherwise was cut short (the process `exec`ed,
//! and its new program ran natively, or it was killed). Between them: the library's events as
//! the plugin took them (times are the emulated clock's, in instructions), each site's misses
//! as they closed (at an interval's end, or when an object of the site was freed), and at the
//! end what each site's pages showed.

use std::io::{self, Read, Write};

/// Which site an object belongs to (as the daemon's recorder keys them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// An allocation site (its id).
    Site(u64),
    /// The small-object allocator's blocks.
    SmallObjects,
    /// Tracked objects whose site the library did not know.
    Unknown,
}

impl Key {
    fn pack(self) -> (u32, u64) {
        match self {
            Key::Site(id) => (0, id),
            Key::SmallObjects => (1, 0),
            Key::Unknown => (2, 0),
        }
    }

    fn unpack(kind: u32, id: u64) -> io::Result<Key> {
        match kind {
            0 => Ok(Key::Site(id)),
            1 => Ok(Key::SmallObjects),
            2 => Ok(Key::Unknown),
            _ => Err(bad(format!("unknown site key kind {kind}"))),
        }
    }
}

/// One record of a trace.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Record {
    /// The process's emulation began (the program started, or a fork's child returned):
    /// its pid, its parent's (0 for the command itself), QEMU's guest base (host address of
    /// guest address 0, learnt once the library attached; 0 until then), and the cache model.
    Start {
        pid: u32,
        parent: u32,
        time: u64,
        cache_bytes: u64,
        cache_ways: u32,
    },
    /// The library attached: QEMU's guest base (the host address of guest address 0).
    Attached { time: u64, guest_base: u64 },
    /// One of the library's events, as it published it (`objtier_wire::Event`).
    Event(objtier_wire::Event),
    /// Misses on `key`'s objects since its last record, in the interval under way.
    Misses { key: Key, loads: u64, stores: u64 },
    /// Misses on no tracked object (stacks, static data, code's data, mapped files) in the
    /// interval under way.
    Unattributed { loads: u64, stores: u64 },
    /// Bytes of small-object memory touched so far (the pseudo-site's resident bytes).
    SmallObjectBytes { bytes: u64 },
    /// Interval `index` ended, at `time` (its end on the emulated clock).
    IntervalEnd { index: u32, time: u64 },
    /// `key`'s pages, each over one object's life: how many had misses in one interval, in
    /// two, in three or more (written at the end).
    Pages {
        key: Key,
        once: u64,
        twice: u64,
        more: u64,
    },
    /// A page of `key` with misses in exactly two intervals: the time between the first miss
    /// of each (a sample of them where there are many).
    Reuse { key: Key, gap: u64 },
    /// The process is about to `exec` (its trace ends here if the exec succeeds).
    Exec { time: u64 },
    /// The process exited at `time`.
    Exit { time: u64 },
}

/// Bytes of one record.
pub const RECORD_BYTES: usize = 48;
/// First record's tag must be this version's [`Record::Start`].
pub const TRACE_VERSION: u32 = 1;

const START: u32 = 1;
const ATTACHED: u32 = 2;
const EVENT: u32 = 3;
const MISSES: u32 = 4;
const UNATTRIBUTED: u32 = 5;
const SMALL: u32 = 6;
const INTERVAL: u32 = 7;
const PAGES: u32 = 8;
const REUSE: u32 = 9;
const EXEC: u32 = 10;
const EXIT: u32 = 11;

fn bad(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl Record {
    /// The record's bytes: a tag, a small field, then five u64s.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let (tag, small, f): (u32, u32, [u64; 5]) = match *self {
            Record::Start {
                pid,
                parent,
                time,
                cache_bytes,
                cache_ways,
            } => (
                START,
                TRACE_VERSION,
                [
                    pid as u64,
                    parent as u64,
                    cache_bytes,
                    cache_ways as u64,
                    time,
                ],
            ),
            Record::Attached { time, guest_base } => (ATTACHED, 0, [guest_base, 0, 0, 0, time]),
            Record::Event(e) => (
                EVENT,
                e.kind,
                [e.addr, e.len, e.site, e.flags as u64, e.time_ns],
            ),
            Record::Misses { key, loads, stores } => {
                let (kind, id) = key.pack();
                (MISSES, kind, [id, loads, stores, 0, 0])
            }
            Record::Unattributed { loads, stores } => (UNATTRIBUTED, 0, [0, loads, stores, 0, 0]),
            Record::SmallObjectBytes { bytes } => (SMALL, 0, [bytes, 0, 0, 0, 0]),
            Record::IntervalEnd { index, time } => (INTERVAL, index, [0, 0, 0, 0, time]),
            Record::Pages {
                key,
                once,
                twice,
                more,
            } => {
                let (kind, id) = key.pack();
                (PAGES, kind, [id, once, twice, more, 0])
            }
            Record::Reuse { key, gap } => {
                let (kind, id) = key.pack();
                (REUSE, kind, [id, gap, 0, 0, 0])
            }
            Record::Exec { time } => (EXEC, 0, [0, 0, 0, 0, time]),
            Record::Exit { time } => (EXIT, 0, [0, 0, 0, 0, time]),
        };
        let mut out = [0u8; RECORD_BYTES];
        out[..4].copy_from_slice(&tag.to_le_bytes());
        out[4..8].copy_from_slice(&small.to_le_bytes());
        for (i, v) in f.iter().enumerate() {
            out[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8; RECORD_BYTES]) -> io::Result<Record> {
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let f = |i: usize| {
            u64::from_le_bytes(bytes[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"))
        };
        let (tag, small) = (u32_at(0), u32_at(4));
        Ok(match tag {
            START => {
                if small != TRACE_VERSION {
                    return Err(bad(format!(
                        "a trace of version {small}, this objtier reads {TRACE_VERSION}: use \
                         the plugin installed with this objtier"
                    )));
                }
                Record::Start {
                    pid: f(0) as u32,
                    parent: f(1) as u32,
                    cache_bytes: f(2),
                    cache_ways: f(3) as u32,
                    time: f(4),
                }
            }
            ATTACHED => Record::Attached {
                guest_base: f(0),
                time: f(4),
            },
            EVENT => Record::Event(objtier_wire::Event {
                kind: small,
                flags: f(3) as u32,
                addr: f(0),
                len: f(1),
                time_ns: f(4),
                site: f(2),
            }),
            MISSES => Record::Misses {
                key: Key::unpack(small, f(0))?,
                loads: f(1),
                stores: f(2),
            },
            UNATTRIBUTED => Record::Unattributed {
                loads: f(1),
                stores: f(2),
            },
            SMALL => Record::SmallObjectBytes { bytes: f(0) },
            INTERVAL => Record::IntervalEnd {
                index: small,
                time: f(4),
            },
            PAGES => Record::Pages {
                key: Key::unpack(small, f(0))?,
                once: f(1),
                twice: f(2),
                more: f(3),
            },
            REUSE => Record::Reuse {
                key: Key::unpack(small, f(0))?,
                gap: f(1),
            },
            EXEC => Record::Exec { time: f(4) },
            EXIT => Record::Exit { time: f(4) },
            _ => return Err(bad(format!("unknown trace record {tag}"))),
        })
    }
}

/// Writes records.
pub trait Sink {
    fn record(&mut self, record: Record);
}

impl Sink for Vec<Record> {
    fn record(&mut self, record: Record) {
        self.push(record);
    }
}

/// Writes records to a file (or anything), keeping the first error for the caller to report.
pub struct Writer<W: Write> {
    out: W,
    pub error: Option<io::Error>,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Writer { out, error: None }
    }

    pub fn flush(&mut self) {
        if let Err(e) = self.out.flush() {
            self.error.get_or_insert(e);
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Sink for Writer<W> {
    fn record(&mut self, record: Record) {
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(&record.encode()) {
                self.error = Some(e);
            }
        }
    }
}

/// Reads a trace's records; a trailing partial record (a process killed while the plugin
/// wrote) ends it.
pub fn read(mut input: impl Read) -> io::Result<Vec<Record>> {
    let mut out = Vec::new();
    let mut buf = [0u8; RECORD_BYTES];
    loop {
        let mut got = 0;
        while got < RECORD_BYTES {
            match input.read(&mut buf[got..])? {
                0 => return Ok(out),
                n => got += n,
            }
        }
        out.push(Record::decode(&buf)?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let all = [
            Record::Start {
                pid: 42,
                parent: 7,
                time: 9,
                cache_bytes: 2 << 20,
                cache_ways: 8,
            },
            Record::Attached {
                time: 10,
                guest_base: 0x1000,
            },
            Record::Event(objtier_wire::Event {
                kind: 1,
                flags: 1,
                addr: 0x4000,
                len: 8192,
                time_ns: 11,
                site: 99,
            }),
            Record::Misses {
                key: Key::Site(99),
                loads: 3,
                stores: 4,
            },
            Record::Misses {
                key: Key::SmallObjects,
                loads: 1,
                stores: 0,
            },
            Record::Unattributed {
                loads: 5,
                stores: 6,
            },
            Record::SmallObjectBytes { bytes: 4096 },
            Record::IntervalEnd { index: 3, time: 8 },
            Record::Pages {
                key: Key::Unknown,
                once: 1,
                twice: 2,
                more: 3,
            },
            Record::Reuse {
                key: Key::Site(5),
                gap: 77,
            },
            Record::Exec { time: 12 },
            Record::Exit { time: 13 },
        ];
        let mut w = Writer::new(Vec::new());
        for r in all {
            w.record(r);
        }
        let mut bytes = w.into_inner();
        bytes.extend_from_slice(&[1, 2, 3]); // a record cut short
        assert_eq!(read(&bytes[..]).unwrap(), all);
        let mut wrong = Record::Start {
            pid: 1,
            parent: 0,
            time: 0,
            cache_bytes: 0,
            cache_ways: 0,
        }
        .encode();
        wrong[4] = 99;
        let e = Record::decode(&wrong).unwrap_err().to_string();
        assert!(e.contains("version 99"), "{e}");
    }
}
