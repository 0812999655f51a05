//! Decoding perf ring-buffer records: the `PERF_RECORD_SAMPLE` layout (fields present in the
//! order `perf_event_open(2)` documents, according to `sample_type`), the data-source bits that
//! tell loads from stores, and AMD IBS op samples carried as `PERF_SAMPLE_RAW`.
//!
//! Pure functions over bytes, so every layout is tested without the hardware.

use perf_event_open_sys::bindings::{
    PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_WEIGHT,
    PERF_SAMPLE_WEIGHT_STRUCT,
};

/// Sample fields objtier knows how to skip or read. Anything else in `sample_type` makes the
/// layout unknowable, so [`parse_sample`] refuses it.
pub const SUPPORTED_SAMPLE_TYPE: u64 = (PERF_SAMPLE_IDENTIFIER
    | PERF_SAMPLE_IP
    | PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ADDR
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_PERIOD
    | PERF_SAMPLE_CALLCHAIN
    | PERF_SAMPLE_RAW
    | PERF_SAMPLE_WEIGHT
    | PERF_SAMPLE_DATA_SRC
    | PERF_SAMPLE_WEIGHT_STRUCT) as u64;

/// Loads, stores, or unknown, as far as the sample says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOp {
    Load,
    Store,
    Unknown,
}

/// One decoded sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    /// Data address (0 when the hardware gave none).
    pub addr: u64,
    pub period: u64,
    /// Access latency in cycles, where the PMU reports it.
    pub weight: u64,
    pub data_src: Option<u64>,
    pub raw: Vec<u8>,
}

impl Sample {
    /// Load or store, from the data source's `mem_op` bits (PERF_MEM_OP_LOAD = 0x2,
    /// PERF_MEM_OP_STORE = 0x4).
    pub fn mem_op(&self) -> MemOp {
        match self.data_src.map(|d| d & 0x1f) {
            Some(op) if op & 0x2 != 0 => MemOp::Load,
            Some(op) if op & 0x4 != 0 => MemOp::Store,
            _ => MemOp::Unknown,
        }
    }
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    #[error("sample record truncated at byte {0}")]
    Truncated(usize),
    #[error("sample_type {0:#x} has fields objtier cannot decode")]
    Unsupported(u64),
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], SampleError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(SampleError::Truncated(self.at))?;
        let out = self
            .bytes
            .get(self.at..end)
            .ok_or(SampleError::Truncated(self.at))?;
        self.at = end;
        Ok(out)
    }
    fn u64(&mut self) -> Result<u64, SampleError> {
        Ok(u64::from_ne_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, SampleError> {
        Ok(u32::from_ne_bytes(self.take(4)?.try_into().unwrap()))
    }
}

/// Decodes the body of a `PERF_RECORD_SAMPLE` (after its 8-byte header).
pub fn parse_sample(body: &[u8], sample_type: u64) -> Result<Sample, SampleError> {
    if sample_type & !SUPPORTED_SAMPLE_TYPE != 0 {
        return Err(SampleError::Unsupported(sample_type));
    }
    let has = |flag: u32| sample_type & flag as u64 != 0;
    let mut r = Reader { bytes: body, at: 0 };
    let mut s = Sample::default();
    if has(PERF_SAMPLE_IDENTIFIER) {
        r.u64()?;
    }
    if has(PERF_SAMPLE_IP) {
        r.u64()?;
    }
    if has(PERF_SAMPLE_TID) {
        s.pid = r.u32()?;
        s.tid = r.u32()?;
    }
    if has(PERF_SAMPLE_TIME) {
        s.time = r.u64()?;
    }
    if has(PERF_SAMPLE_ADDR) {
        s.addr = r.u64()?;
    }
    if has(PERF_SAMPLE_ID) {
        r.u64()?;
    }
    if has(PERF_SAMPLE_STREAM_ID) {
        r.u64()?;
    }
    if has(PERF_SAMPLE_CPU) {
        r.u64()?;
    }
    if has(PERF_SAMPLE_PERIOD) {
        s.period = r.u64()?;
    }
    if has(PERF_SAMPLE_CALLCHAIN) {
        let n = r.u64()? as usize;
        r.take(n.checked_mul(8).ok_or(SampleError::Truncated(r.at))?)?;
    }
    if has(PERF_SAMPLE_RAW) {
        let n = r.u32()? as usize;
        s.raw = r.take(n)?.to_vec();
    }
    if has(PERF_SAMPLE_WEIGHT) || has(PERF_SAMPLE_WEIGHT_STRUCT) {
        let w = r.u64()?;
        // The struct form keeps the access latency in its low 32 bits.
        s.weight = if has(PERF_SAMPLE_WEIGHT_STRUCT) {
            w & 0xffff_ffff
        } else {
            w
        };
    }
    if has(PERF_SAMPLE_DATA_SRC) {
        s.data_src = Some(r.u64()?);
    }
    Ok(s)
}

/// Whether `addr` lies in the kernel's half of the address space: the top bit set, on x86-64
/// (canonical addresses: user space ends at 0x0000_7fff_ffff_ffff, the kernel's half starts
/// at 0xffff_8000_0000_0000) as on arm64 (TTBR1 addresses). For samples the PMU was not told
/// to leave out of the kernel (AMD IBS).
pub fn is_kernel_address(addr: u64) -> bool {
    addr >> 63 == 1
}

/// What objtier takes from an AMD IBS op sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbsOp {
    /// The op's instruction address (IBS_OP_RIP).
    pub ip: u64,
    /// The data linear address (IBS_DC_LINADDR).
    pub addr: u64,
    pub op: MemOp,
}

impl IbsOp {
    /// Taken in the kernel: its instruction, or the data it touched, is a kernel address. IBS
    /// samples every privilege level (see `ibs_op` in [`super::event`]), so these are dropped
    /// here, as `exclude_kernel` would have done.
    pub fn in_kernel(&self) -> bool {
        is_kernel_address(self.ip) || is_kernel_address(self.addr)
    }
}

/// An AMD IBS op sample, from its `PERF_SAMPLE_RAW` bytes: a 4-byte capabilities word, then
/// the IBS MSRs in order (IBS_OP_CTL, IBS_OP_RIP, IBS_OP_DATA, IBS_OP_DATA2, IBS_OP_DATA3,
/// IBS_DC_LINADDR, IBS_DC_PHYSADDR, ...). Returns the op's instruction and data addresses and
/// whether it was a load or a store, when IBS_OP_DATA3 says the data address is valid.
pub fn parse_ibs_op_raw(raw: &[u8]) -> Option<IbsOp> {
    let msr = |i: usize| -> Option<u64> {
        let at = 4 + i * 8;
        Some(u64::from_ne_bytes(raw.get(at..at + 8)?.try_into().ok()?))
    };
    const OP_RIP: usize = 1;
    const OP_DATA3: usize = 4;
    const DC_LINADDR: usize = 5;
    let data3 = msr(OP_DATA3)?;
    let load = data3 & 1 != 0;
    let store = data3 & (1 << 1) != 0;
    let linaddr_valid = data3 & (1 << 17) != 0;
    if !linaddr_valid || !(load || store) {
        return None;
    }
    let op = if store { MemOp::Store } else { MemOp::Load };
    Some(IbsOp {
        ip: msr(OP_RIP)?,
        addr: msr(DC_LINADDR)?,
        op,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(fields: &[u64]) -> Vec<u8> {
        fields.iter().flat_map(|f| f.to_ne_bytes()).collect()
    }

    /// Intel PEBS `mem-loads` as `perf record -d -W --data-src` asks for it: IP, TID, TIME,
    /// ADDR, PERIOD, WEIGHT, DATA_SRC. The data source is a load that hit local DRAM
    /// (mem_op LOAD, mem_lvl LOC_RAM|HIT).
    #[test]
    fn pebs_load_sample() {
        let sample_type = (PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_ADDR
            | PERF_SAMPLE_PERIOD
            | PERF_SAMPLE_WEIGHT
            | PERF_SAMPLE_DATA_SRC) as u64;
        let pid_tid = (77u64 << 32) | 1234; // pid 1234, tid 77, as two native u32s
        let data_src = 0x2 | (0x80 | 0x2) << 5;
        let body = le(&[
            0x5555_0000_1000,
            pid_tid,
            987_654_321,
            0x7f00_dead_b000,
            4096,
            312,
            data_src,
        ]);
        let s = parse_sample(&body, sample_type).unwrap();
        assert_eq!((s.pid, s.tid), (1234, 77));
        assert_eq!(s.time, 987_654_321);
        assert_eq!(s.addr, 0x7f00_dead_b000);
        assert_eq!((s.period, s.weight), (4096, 312));
        assert_eq!(s.mem_op(), MemOp::Load);
        assert_eq!(
            parse_sample(&body[..body.len() - 4], sample_type),
            Err(SampleError::Truncated(48))
        );
    }

    /// `mem-stores` with the struct weight form: the store flag and latency in the low half.
    #[test]
    fn pebs_store_sample_with_weight_struct() {
        let sample_type =
            (PERF_SAMPLE_TID | PERF_SAMPLE_ADDR | PERF_SAMPLE_WEIGHT_STRUCT | PERF_SAMPLE_DATA_SRC)
                as u64;
        let body = le(&[(9u64 << 32) | 9, 0x1000, (5u64 << 32) | 40, 0x4]);
        let s = parse_sample(&body, sample_type).unwrap();
        assert_eq!(s.weight, 40);
        assert_eq!(s.mem_op(), MemOp::Store);
    }

    /// AMD IBS op: IDENTIFIER, TID, TIME, CPU, PERIOD, RAW (caps + 8 MSRs), no ADDR.
    #[test]
    fn ibs_op_sample_carries_the_address_in_raw() {
        let sample_type = (PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU
            | PERF_SAMPLE_PERIOD
            | PERF_SAMPLE_RAW) as u64;
        let mut raw = 0x3ffu32.to_ne_bytes().to_vec(); // caps
        let data3_store = (1 << 17) | (1 << 1);
        raw.extend(le(&[
            0,
            0x40_1000,
            0,
            0,
            data3_store,
            0x7ffd_0000_2040,
            0x1_2340,
            0,
        ]));
        let mut body = le(&[42, (3u64 << 32) | 3, 100, 1, 65536]);
        body.extend((raw.len() as u32).to_ne_bytes());
        body.extend(&raw);
        let s = parse_sample(&body, sample_type).unwrap();
        assert_eq!(s.pid, 3);
        assert_eq!(s.addr, 0, "IBS gives the address in RAW, not ADDR");
        let op = parse_ibs_op_raw(&s.raw).unwrap();
        assert_eq!(
            op,
            IbsOp {
                ip: 0x40_1000,
                addr: 0x7ffd_0000_2040,
                op: MemOp::Store
            }
        );
        assert!(!op.in_kernel());
        // IBS samples the kernel too: an op there, or touching kernel data, says so.
        let kernel_ip = IbsOp {
            ip: 0xffff_ffff_8100_0000,
            ..op
        };
        let kernel_data = IbsOp {
            addr: 0xffff_8880_0000_1000,
            ..op
        };
        assert!(kernel_ip.in_kernel() && kernel_data.in_kernel());
        // An op that was not a memory access, or whose address is not valid, says nothing.
        let mut not_mem = raw.clone();
        not_mem[4 + 4 * 8..4 + 5 * 8].copy_from_slice(&(1u64 << 17).to_ne_bytes());
        assert_eq!(parse_ibs_op_raw(&not_mem), None);
        assert_eq!(parse_ibs_op_raw(&raw[..20]), None);
    }

    /// The software `page-faults` event objtier's tests use: TID, TIME, ADDR.
    #[test]
    fn page_fault_sample_and_unknown_layouts() {
        let sample_type = (PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR) as u64;
        let s = parse_sample(&le(&[(8u64 << 32) | 8, 5, 0xabc000]), sample_type).unwrap();
        assert_eq!((s.pid, s.addr, s.mem_op()), (8, 0xabc000, MemOp::Unknown));
        let regs_user = 1u64 << 12;
        assert_eq!(
            parse_sample(&[], regs_user),
            Err(SampleError::Unsupported(regs_user))
        );
    }
}
