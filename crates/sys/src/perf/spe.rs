//! Arm SPE (Statistical Profiling Extension) records, as the `arm_spe` PMU writes them into the
//! perf AUX buffer: a stream of packets, one record per sampled operation, each closed by an
//! End or a Timestamp packet. objtier needs two things from a record: the data virtual address
//! (Address packet, index 2) and whether the operation was a load or a store (Operation Type
//! packet, class load/store). Every other packet is skipped by its size.
//!
//! Packet headers (Arm ARM, "Statistical Profiling Extension", packet formats):
//! `0x00` padding; `0x01` End; `0x71` Timestamp (8 bytes); `0b01_ss_0010` Events,
//! `0b01_ss_0011` Data Source, `0b01_ss_01xx` Context, `0b0100_10cc` Operation Type (1 byte);
//! `0b10_11_0iii` Address (8 bytes, index iii), `0b10_ss_1iii` Counter; `0b0010_00ii` an
//! extended header whose next byte is an Address or Counter header with index bits 4:3 = ii.
//! Payload size for the `ss` forms is 1 << ss bytes.

use super::sample::MemOp;

/// One decoded SPE record that touched memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpeAccess {
    pub addr: u64,
    pub op: MemOp,
}

/// The Address packet index of the data virtual address.
const DATA_VIRTUAL_ADDRESS: u8 = 2;

/// Decodes a buffer of SPE packets into the memory accesses it records. Stops at the first
/// byte it cannot decode (the rest of a truncated buffer).
pub fn decode(mut bytes: &[u8]) -> Vec<SpeAccess> {
    let mut out = Vec::new();
    let (mut addr, mut op) = (None::<u64>, None::<MemOp>);
    let mut finish = |addr: &mut Option<u64>, op: &mut Option<MemOp>| {
        if let (Some(a), Some(o)) = (addr.take(), op.take()) {
            out.push(SpeAccess { addr: a, op: o });
        }
        *addr = None;
        *op = None;
    };
    while let Some(&header) = bytes.first() {
        // Extended header: the index's high bits, then the real header.
        let (header, index_high, header_len) = if header & 0b1111_1100 == 0b0010_0000 {
            let Some(&next) = bytes.get(1) else { break };
            (next, (header & 0b11) << 3, 2)
        } else {
            (header, 0, 1)
        };
        let payload_len = match header {
            0x00 => 0,
            0x01 => {
                finish(&mut addr, &mut op);
                0
            }
            0x71 => 8,
            h if h & 0b1100_1111 == 0b0100_0010 => 1 << ((h >> 4) & 0b11), // events
            h if h & 0b1100_1111 == 0b0100_0011 => 1 << ((h >> 4) & 0b11), // data source
            h if h & 0b1111_1100 == 0b0100_1000 => 1,                      // operation type
            h if h & 0b1100_1100 == 0b0100_0100 => 1 << ((h >> 4) & 0b11), // context
            h if h & 0b1111_1000 == 0b1011_0000 => 8,                      // address
            h if h & 0b1100_1000 == 0b1000_1000 => 1 << ((h >> 4) & 0b11), // counter
            _ => break,
        };
        let Some(payload) = bytes.get(header_len..header_len + payload_len) else {
            break;
        };
        if header == 0x71 {
            // A Timestamp packet also closes a record.
            finish(&mut addr, &mut op);
        } else if header & 0b1111_1000 == 0b1011_0000 {
            let index = index_high | (header & 0b111);
            if index == DATA_VIRTUAL_ADDRESS {
                let raw = u64::from_le_bytes(payload.try_into().unwrap());
                // Bits 55:0 are the address; sign-extend from bit 55 (the top byte is a tag).
                let va = raw & ((1 << 56) - 1);
                addr = Some(if va & (1 << 55) != 0 {
                    va | 0xff00_0000_0000_0000
                } else {
                    va
                });
            }
        } else if header & 0b1111_1100 == 0b0100_1000 {
            // Operation type: class 1 is load/store; payload bit 0 set for a store.
            if header & 0b11 == 1 {
                op = Some(if payload[0] & 1 != 0 {
                    MemOp::Store
                } else {
                    MemOp::Load
                });
            }
        }
        bytes = &bytes[header_len + payload_len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(index: u8, va: u64) -> Vec<u8> {
        let mut p = if index > 7 {
            vec![0x20 | (index >> 3), 0xb0 | (index & 7)]
        } else {
            vec![0xb0 | index]
        };
        p.extend(va.to_le_bytes());
        p
    }

    /// Two records as `arm_spe` writes them: PC address, operation type, events, latency
    /// counter, data address, data source, timestamp; the second a store ended by End.
    #[test]
    fn decodes_loads_and_stores_from_a_packet_stream() {
        let mut buf = Vec::new();
        buf.extend(address(0, 0xffff_8000_1000_0000 | 0x40_1234)); // PC, with a tag
        buf.extend([0x49, 0x00]); // operation type: load/store class, load
        buf.extend([0x52, 0x02, 0x00]); // events, 2 bytes
        buf.extend([0x99, 0x20, 0x00]); // counter index 1 (latency), 2 bytes
        buf.extend(address(2, 0x0000_7fff_aaaa_1000));
        buf.extend([0x43, 0x00]); // data source, 1 byte
        buf.push(0x71);
        buf.extend(1234u64.to_le_bytes()); // timestamp: ends the record
        buf.extend(address(0, 0x40_2000));
        buf.extend([0x49, 0x01]); // store
        buf.extend(address(2, 0x0000_7fff_bbbb_2000));
        buf.push(0x01); // end
        buf.extend([0x00, 0x00]); // padding
                                  // A branch (operation class 2) with a data address is not a memory access.
        buf.extend([0x4a, 0x00]);
        buf.extend(address(2, 0x1000));
        buf.push(0x01);
        assert_eq!(
            decode(&buf),
            vec![
                SpeAccess {
                    addr: 0x7fff_aaaa_1000,
                    op: MemOp::Load
                },
                SpeAccess {
                    addr: 0x7fff_bbbb_2000,
                    op: MemOp::Store
                },
            ]
        );
    }

    #[test]
    fn extended_headers_and_truncation() {
        let mut buf = address(10, 0x5000); // extended index 10: not the data address
        buf.extend([0x49, 0x00]);
        buf.extend(address(2, 0x6000));
        buf.push(0x01);
        assert_eq!(
            decode(&buf),
            vec![SpeAccess {
                addr: 0x6000,
                op: MemOp::Load
            }]
        );
        // Cut inside the last address packet: what was complete is kept, nothing invented.
        let mut cut = buf.clone();
        cut.extend([0x49, 0x01]);
        cut.extend(&address(2, 0x7000)[..5]);
        assert_eq!(decode(&cut).len(), 1);
        assert!(
            decode(&[0xff, 0x01]).is_empty(),
            "an unknown header stops decoding"
        );
    }
}
