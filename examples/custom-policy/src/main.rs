//! An objtier daemon with a policy of its own. Copy this crate to write yours.
//!
//! objtier's daemon runs five routines at every interval (see `objtier_policy::routines`):
//! aggregate each record's sampled accesses, ask the triggers whether to migrate now, prioritize
//! the records, enforce a tier per record (with the tiers' budgets), and turn that into page
//! moves (which pages, in what order, which huge pages to split first). Each is a trait; the
//! built-ins implement them, and a policy is any mix of built-in and custom routines, the rest
//! from `Policy::default()`. Everything else (the allocator, sampling, executing the moves
//! within the step's deadline and rate limits) stays the daemon's.
//!
//! This one changes two routines:
//!
//! - [`RecentFirst`] ranks records by the accesses of the *latest* interval per byte, with the
//!   EMA only breaking ties. The paper's APB ranks by the EMA, which with alpha 0.1 keeps a
//!   formerly hot object above a newly hot one for many intervals; a workload whose hot set
//!   moves often may prefer to follow it at once, at the cost of more migrations.
//! - [`QuietPeriod`] is a trigger that migrates every interval, except during the first
//!   `settle` intervals after the daemon starts, to let a program's initialisation pass.
//!
//! Run it in place of `objtier daemon` (same socket, so `objtier run --no-daemon` and
//! `objtier status` work with it):
//!
//! ```text
//! cargo run --release -p objtier-custom-policy -- [SOCKET]
//! ```

use objtier_daemon::config::{default_socket_path, DaemonConfig};
use objtier_policy::{Candidate, Ema, Policy, Prioritize, Signals, Trigger};

/// Ranks by the latest interval's accesses per byte, then by the EMA per byte.
pub struct RecentFirst;

impl Prioritize for RecentFirst {
    fn name(&self) -> String {
        "recent-first".into()
    }

    fn order(&self, candidates: &[Candidate]) -> Vec<usize> {
        let per_byte = |accesses: f64, c: &Candidate| accesses / c.len_bytes.max(1) as f64;
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by(|&a, &b| {
            let (ca, cb) = (&candidates[a], &candidates[b]);
            per_byte(cb.recent_accesses, cb)
                .total_cmp(&per_byte(ca.recent_accesses, ca))
                .then(per_byte(cb.ema_accesses, cb).total_cmp(&per_byte(ca.ema_accesses, ca)))
                .then(ca.id.cmp(&cb.id))
        });
        order
    }
}

/// Migrates at every interval once `settle` intervals have passed.
pub struct QuietPeriod {
    pub settle: u32,
    seen: u32,
}

impl Trigger for QuietPeriod {
    fn name(&self) -> String {
        format!("quiet-period:{}", self.settle)
    }

    fn check(&mut self, _signals: &Signals) -> Option<String> {
        self.seen += 1;
        (self.seen > self.settle).then(|| "past the quiet period".to_string())
    }
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let socket = std::env::args_os()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(default_socket_path);
    // Every other setting keeps objtier's defaults; change them here (the fields of
    // DaemonConfig are the options of `objtier daemon`).
    let config = DaemonConfig::new(socket);
    let policy = Policy {
        aggregate: Box::new(Ema {
            alpha: config.alpha,
        }),
        prioritize: Box::new(RecentFirst),
        triggers: vec![Box::new(QuietPeriod { settle: 3, seen: 0 })],
        ..Policy::default()
    };
    objtier_daemon::run_with_policy(config, policy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_policy::TierBytes;

    fn record(id: usize, recent: f64, ema: f64) -> Candidate {
        Candidate {
            id,
            process: 0,
            len_bytes: 1 << 20,
            created_ns: 0,
            last_access_ns: 0,
            ema_accesses: ema,
            recent_accesses: recent,
            previous_accesses: 0.0,
            resident_bytes_by_tier: TierBytes::from_slice(&[1 << 20, 0]),
            advice: 0,
        }
    }

    #[test]
    fn a_newly_hot_record_outranks_a_formerly_hot_one() {
        // Record 0 was hot for a long time and is idle now; record 1 just became hot.
        let c = [
            record(0, 0.0, 90.0),
            record(1, 50.0, 5.0),
            record(2, 0.0, 1.0),
        ];
        assert_eq!(RecentFirst.order(&c), [1, 0, 2]);
        // The paper's APB keeps the old one first.
        assert_eq!(
            objtier_policy::prioritize(&c, objtier_policy::Prioritization::Apb),
            [0, 1, 2]
        );
    }

    #[test]
    fn the_quiet_period_holds_migrations_back() {
        let mut t = QuietPeriod { settle: 2, seen: 0 };
        let fired: Vec<bool> = (0..4)
            .map(|_| t.check(&Signals::default()).is_some())
            .collect();
        assert_eq!(fired, [false, false, true, true]);
    }
}
