//! Options, read from `OBJTIER_*` environment variables once, in the library's constructor.
//!
//! `getenv` is not used: the first `malloc` can arrive from the dynamic loader before libc has
//! finished initialising, and nothing here may allocate. The constructor scans `environ` directly;
//! until it has run, the defaults apply (and nothing is reported to a daemon yet).

use core::cell::UnsafeCell;
use core::ffi::c_char;
use core::sync::atomic::{AtomicBool, Ordering};

/// Longest socket path a `sockaddr_un` holds (including the terminating NUL).
pub const SOCKET_PATH_MAX: usize = 108;
/// Longest placement file path kept (including the terminating NUL).
pub const PLACEMENT_PATH_MAX: usize = 1024;

#[derive(Clone, Copy)]
pub struct Options {
    /// Objects at least this large get pages of their own and are reported (`OBJTIER_TRACK_MIN`).
    pub track_min_bytes: usize,
    /// ...unless rounding them up to whole pages would leave more than this percentage of those
    /// pages unused (`OBJTIER_TRACK_MAX_WASTE`, 0-100; 100 tracks every one).
    pub track_max_waste_percent: u8,
    /// Frames of call path hashed into a site id (`OBJTIER_SITE_DEPTH`, 0 disables).
    pub site_depth: usize,
    /// Whether to attach to a daemon at all (`OBJTIER_ATTACH=0` turns it off).
    pub attach: bool,
    /// Ring slots (`OBJTIER_RING_CAPACITY`, rounded up to a power of two).
    pub ring_capacity: u32,
    /// Fast-tier cap for this process, sent to the daemon (`OBJTIER_FAST_CAPACITY`).
    pub fast_capacity_bytes: u64,
    /// Priority sent to the daemon (`OBJTIER_PRIORITY`).
    pub priority: i32,
    /// Log attach/detach decisions to stderr (`OBJTIER_DEBUG=1`).
    pub debug: bool,
    /// Explicit daemon socket (`OBJTIER_SOCKET`), NUL-terminated; empty means the default.
    pub socket_path: [u8; SOCKET_PATH_MAX],
    /// `XDG_RUNTIME_DIR`, NUL-terminated; used for the per-user default socket.
    pub runtime_dir: [u8; SOCKET_PATH_MAX],
    /// The profile session this process belongs to (`OBJTIER_PROFILE`, set by `objtier
    /// profile`); 0 for none.
    pub profile_token: u64,
    /// The placement file to hand the daemon (`OBJTIER_PLACEMENT`, set by `objtier run
    /// --placement`), NUL-terminated; empty for none.
    pub placement_path: [u8; PLACEMENT_PATH_MAX],
    /// Ask the daemon never to move this process's pages (`OBJTIER_NO_MIGRATE=1`).
    pub no_migrate: bool,
    /// The emulation channel's directory (`OBJTIER_EMULATE`, set by `objtier profile --source
    /// emulate`), NUL-terminated; empty for none (`emulate.rs`).
    pub emulate_path: [u8; PLACEMENT_PATH_MAX],
}

impl Options {
    const DEFAULT: Options = Options {
        track_min_bytes: 4096,
        track_max_waste_percent: 25,
        site_depth: 16,
        attach: true,
        ring_capacity: objtier_wire::DEFAULT_RING_CAPACITY,
        fast_capacity_bytes: 0,
        priority: 0,
        debug: false,
        socket_path: [0; SOCKET_PATH_MAX],
        runtime_dir: [0; SOCKET_PATH_MAX],
        profile_token: 0,
        placement_path: [0; PLACEMENT_PATH_MAX],
        no_migrate: false,
        emulate_path: [0; PLACEMENT_PATH_MAX],
    };

    /// Whether a placement file was given.
    pub fn has_placement(&self) -> bool {
        self.placement_path[0] != 0
    }

    /// The emulation channel's directory, without its NUL (empty for none).
    pub fn emulate_dir(&self) -> &[u8] {
        let end = self.emulate_path.iter().position(|&b| b == 0).unwrap_or(0);
        &self.emulate_path[..end]
    }

    /// Whether an object of `size` bytes is tracked: it gets pages of its own and is reported.
    /// A size just above a page multiple (sqlite's 4.2 KiB page-cache entries) would leave most
    /// of its last page empty, and no other object may share that page: such objects stay in
    /// the small-object allocator, whose memory is tiered in blocks, unless the waste is within
    /// `track_max_waste_percent` of the pages (jemalloc bounds its size classes' waste at 20 %,
    /// mimalloc at 12.5 %). At 25 %: 4,097-6,143 and 8,193-9,215 bytes are not tracked.
    #[inline]
    pub fn tracks(&self, size: usize) -> bool {
        if size < self.track_min_bytes {
            return false;
        }
        let rounded = size.next_multiple_of(objtier_wire::PAGE_SIZE);
        (rounded - size) * 100 <= rounded * self.track_max_waste_percent as usize
    }
}

struct OptionsCell(UnsafeCell<Options>);
// SAFETY: written once by the constructor before READY is set, read-only afterwards.
unsafe impl Sync for OptionsCell {}

static OPTIONS: OptionsCell = OptionsCell(UnsafeCell::new(Options::DEFAULT));
static READY: AtomicBool = AtomicBool::new(false);

/// The options in force (defaults until the constructor has run).
#[inline]
pub fn get() -> &'static Options {
    // SAFETY: OPTIONS is only written in `init`, which runs once, in the constructor, before any
    // thread other than the main one exists (constructors run before main), and before READY.
    unsafe { &*OPTIONS.0.get() }
}

/// True once the constructor has read the environment.
#[inline]
pub fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

extern "C" {
    static environ: *const *const c_char;
}

/// Reads `OBJTIER_*` from `environ`. Called once from the library constructor.
pub fn init() {
    let mut options = Options::DEFAULT;
    // SAFETY: `environ` is libc's NUL-terminated array of NUL-terminated strings; by the time
    // constructors of preloaded libraries run, libc has set it up. We only read it.
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let bytes = cstr_bytes(*entry);
            apply(&mut options, bytes);
            entry = entry.add(1);
        }
    }
    // SAFETY: see `get`; single-threaded constructor context, before READY is published.
    unsafe { *OPTIONS.0.get() = options };
    READY.store(true, Ordering::Release);
}

/// # Safety
/// `p` must point to a NUL-terminated string that outlives the returned slice.
unsafe fn cstr_bytes(p: *const c_char) -> &'static [u8] {
    // SAFETY: forwarded from the caller.
    unsafe { core::slice::from_raw_parts(p as *const u8, libc::strlen(p)) }
}

fn apply(options: &mut Options, entry: &[u8]) {
    let Some(eq) = entry.iter().position(|&b| b == b'=') else {
        return;
    };
    let (name, value) = (&entry[..eq], &entry[eq + 1..]);
    match name {
        b"OBJTIER_TRACK_MIN" => {
            if let Some(v) = parse_size(value) {
                options.track_min_bytes = v.max(objtier_wire::PAGE_SIZE as u64) as usize;
            }
        }
        b"OBJTIER_TRACK_MAX_WASTE" => {
            if let Some(v) = parse_size(value).filter(|&v| v <= 100) {
                options.track_max_waste_percent = v as u8;
            }
        }
        b"OBJTIER_SITE_DEPTH" => {
            if let Some(v) = parse_size(value) {
                options.site_depth = (v as usize).min(64);
            }
        }
        b"OBJTIER_ATTACH" => options.attach = !matches!(value, b"0" | b"no" | b"false" | b"off"),
        b"OBJTIER_RING_CAPACITY" => {
            if let Some(v) = parse_size(value) {
                let v = (v.clamp(64, objtier_wire::MAX_RING_CAPACITY as u64)) as u32;
                options.ring_capacity = v.next_power_of_two();
            }
        }
        b"OBJTIER_FAST_CAPACITY" => {
            if let Some(v) = parse_size(value) {
                options.fast_capacity_bytes = v;
            }
        }
        b"OBJTIER_PRIORITY" => {
            if let Some(v) = parse_i32(value) {
                options.priority = v;
            }
        }
        b"OBJTIER_DEBUG" => options.debug = matches!(value, b"1" | b"yes" | b"true" | b"on"),
        b"OBJTIER_SOCKET" => copy_path(&mut options.socket_path, value),
        b"XDG_RUNTIME_DIR" => copy_path(&mut options.runtime_dir, value),
        b"OBJTIER_PROFILE" => {
            if let Some(v) =
                parse_size(value).filter(|&v| value.iter().all(u8::is_ascii_digit) && v > 0)
            {
                options.profile_token = v;
            }
        }
        // Relative paths would name another file once the program changes directory.
        b"OBJTIER_PLACEMENT" if value.first() == Some(&b'/') => {
            copy_path(&mut options.placement_path, value)
        }
        b"OBJTIER_EMULATE" if value.first() == Some(&b'/') => {
            copy_path(&mut options.emulate_path, value)
        }
        b"OBJTIER_NO_MIGRATE" => {
            options.no_migrate = matches!(value, b"1" | b"yes" | b"true" | b"on")
        }
        _ => {}
    }
}

fn copy_path<const N: usize>(dst: &mut [u8; N], value: &[u8]) {
    if value.is_empty() || value.len() >= N {
        return;
    }
    dst[..value.len()].copy_from_slice(value);
    dst[value.len()] = 0;
}

/// Parses `4096`, `64K`, `1M`, `2G`, `1GiB` (binary units). None on anything else.
pub fn parse_size(value: &[u8]) -> Option<u64> {
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let mut number: u64 = 0;
    for &b in &value[..digits] {
        number = number.checked_mul(10)?.checked_add((b - b'0') as u64)?;
    }
    let shift = match &value[digits..] {
        b"" | b"B" | b"b" => 0,
        b"K" | b"k" | b"KiB" | b"KB" => 10,
        b"M" | b"m" | b"MiB" | b"MB" => 20,
        b"G" | b"g" | b"GiB" | b"GB" => 30,
        b"T" | b"t" | b"TiB" | b"TB" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

fn parse_i32(value: &[u8]) -> Option<i32> {
    let (negative, digits) = match value.first() {
        Some(b'-') => (true, &value[1..]),
        _ => (false, value),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || digits.len() > 9 {
        return None;
    }
    let mut n: i32 = 0;
    for &b in digits {
        n = n * 10 + (b - b'0') as i32;
    }
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size(b"4096"), Some(4096));
        assert_eq!(parse_size(b"64K"), Some(65536));
        assert_eq!(parse_size(b"2GiB"), Some(2 << 30));
        assert_eq!(parse_size(b"x"), None);
        assert_eq!(parse_size(b"12Q"), None);
        assert_eq!(parse_size(b"99999999999999999999"), None);
    }

    #[test]
    fn env_entries() {
        let mut o = Options::DEFAULT;
        apply(&mut o, b"OBJTIER_TRACK_MIN=100");
        assert_eq!(o.track_min_bytes, 4096, "never below a page");
        apply(&mut o, b"OBJTIER_TRACK_MIN=64K");
        assert_eq!(o.track_min_bytes, 65536);
        apply(&mut o, b"OBJTIER_PRIORITY=-3");
        assert_eq!(o.priority, -3);
        apply(&mut o, b"OBJTIER_SOCKET=/tmp/x.sock");
        assert_eq!(&o.socket_path[..12], b"/tmp/x.sock\0");
        apply(&mut o, b"OBJTIER_ATTACH=0");
        assert!(!o.attach);
        apply(&mut o, b"garbage");
        apply(&mut o, b"OBJTIER_PROFILE=18446744073709551615");
        assert_eq!(o.profile_token, u64::MAX);
        apply(&mut o, b"OBJTIER_PROFILE=12K");
        assert_eq!(o.profile_token, u64::MAX, "a token is digits only");
        assert!(!o.has_placement());
        apply(&mut o, b"OBJTIER_PLACEMENT=relative.json");
        assert!(!o.has_placement(), "only absolute paths");
        apply(&mut o, b"OBJTIER_PLACEMENT=/tmp/app.placement.json");
        assert!(o.has_placement());
        assert_eq!(&o.placement_path[..24], b"/tmp/app.placement.json\0");
        apply(&mut o, b"OBJTIER_NO_MIGRATE=1");
        assert!(o.no_migrate);
        assert!(o.emulate_dir().is_empty());
        apply(&mut o, b"OBJTIER_EMULATE=/tmp/objtier-emulate.x");
        assert_eq!(o.emulate_dir(), b"/tmp/objtier-emulate.x");
    }

    #[test]
    fn tracked_sizes_waste_at_most_the_bound() {
        let mut o = Options::DEFAULT;
        let tracked =
            |o: &Options, sizes: &[usize]| sizes.iter().map(|&s| o.tracks(s)).collect::<Vec<_>>();
        assert_eq!(
            tracked(
                &o,
                &[4095, 4096, 4097, 4400, 6143, 6144, 8192, 8193, 9215, 9216, 12289]
            ),
            [false, true, false, false, false, true, true, false, false, true, true]
        );
        apply(&mut o, b"OBJTIER_TRACK_MAX_WASTE=100");
        assert!(o.tracks(4097) && o.tracks(8193) && !o.tracks(4095));
        apply(&mut o, b"OBJTIER_TRACK_MAX_WASTE=0");
        assert!(o.tracks(8192) && !o.tracks(8191) && !o.tracks(12287));
        apply(&mut o, b"OBJTIER_TRACK_MAX_WASTE=101");
        assert_eq!(o.track_max_waste_percent, 0, "out of range: ignored");
        apply(&mut o, b"OBJTIER_TRACK_MIN=64K");
        apply(&mut o, b"OBJTIER_TRACK_MAX_WASTE=25");
        assert!(
            !o.tracks(8192) && o.tracks(65536) && o.tracks(65537),
            "a large object wastes little"
        );
    }
}
