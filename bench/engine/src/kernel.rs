//! What the kernel's page queries cost per page on this machine, which the fake mover stands in for.

use crate::*;

/// What locating a page costs the kernel, per page asked, on `pages` pages of our own memory
/// laid out in records as the bench's are: all of them (a first interval), and the records of
/// one turn when a twelfth is located at a time (a steady interval at 10^6 records). With
/// `move_pages` (what an unprivileged daemon, or one on a kernel without memory blocks, uses)
/// and with the mover the daemon uses here (`/proc/PID/pagemap` as root), as
/// (how, ns a page for all, ns a page for a twelfth).
pub(crate) fn kernel_query_ns_per_page(pages: usize) -> Vec<(&'static str, f64, f64)> {
    use objtier_sys::pages::LinuxPageMover;
    let mut memory = vec![1u8; (pages + 1) * PAGE_SIZE];
    let first = (memory.as_mut_ptr() as u64).next_multiple_of(PAGE_SIZE as u64);
    let end = first + pages as u64 * PAGE_SIZE as u64;
    let mut rng = Rng(0x0b7_1e4);
    let (mut all, mut turn) = (Vec::new(), Vec::new());
    let mut addr = first;
    loop {
        if rng.next().is_multiple_of(8) {
            addr += PAGE_SIZE as u64;
        }
        let len = rng.pages() * PAGE_SIZE as u64;
        if addr + len > end {
            break;
        }
        let record: Vec<u64> = (addr..addr + len).step_by(PAGE_SIZE).collect();
        if objtier_daemon::interval::locate_in_turn(addr, 12, 0) {
            turn.extend_from_slice(&record);
        }
        all.extend(record);
        addr += len;
    }
    let daemons = LinuxPageMover::new();
    let movers = if daemons.locates_with() == "move_pages" {
        vec![daemons]
    } else {
        vec![LinuxPageMover::default(), daemons]
    };
    let mut out = Vec::new();
    for mut mover in movers {
        let mut time = |asked: &[u64]| {
            let mut status = vec![0; asked.len()];
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let t = cpu_ns();
                mover.query(std::process::id(), asked, &mut status).ok()?;
                best = best.min((cpu_ns() - t) as f64 / asked.len() as f64);
            }
            Some(best)
        };
        if let (Some(a), Some(t)) = (time(&all), time(&turn)) {
            out.push((mover.locates_with(), a, t));
        }
    }
    std::hint::black_box(&mut memory);
    out
}
