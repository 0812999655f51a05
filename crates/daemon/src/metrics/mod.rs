//! `objtier daemon --metrics ADDR`: Prometheus' text exposition format, served from the
//! daemon's own loop.
//!
//! The endpoint (a local TCP address or a Unix socket path) is polled with everything else
//! ([`crate::serve`]), so a scrape reads the daemon's state between two of its steps, as
//! `objtier status` does, and no second thread shares that state. A scrape is a short HTTP/1.1
//! exchange ([`http`]): the request is read as it arrives, within two seconds, and the answer
//! is the registry [`exposition`] builds from the daemon at that moment. What cannot be read
//! from the state at scrape time is kept here: the interval-duration histogram and the ring
//! counters of processes that have detached (so the counters never go down).

pub mod address;
pub mod endpoint;
pub mod exposition;
pub mod http;

pub use address::{MetricsAddress, DEFAULT_METRICS_PROCESSES};
pub use endpoint::{Metrics, RingTotals};

use crate::daemon::Daemon;
use std::time::Duration;

impl Daemon {
    /// Serves the metrics endpoint after a wake-up (see [`Metrics::serve`]).
    pub(crate) fn serve_metrics(&mut self) {
        if let Some(mut metrics) = self.metrics.take() {
            metrics.serve(|m| exposition::encode(self, m));
            self.metrics = Some(metrics);
        }
    }

    /// Records the interval that just ended, and how long its step `took`, in the histogram.
    pub(crate) fn interval_ended(&mut self, took: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.interval_seconds.observe(took.as_secs_f64());
        }
    }
}
