//! Where `--metrics` listens, as the command line and the file give it.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

/// Most processes exported one by one by default (`--metrics-processes`): each adds a series
/// per tier, and a scrape of a machine running thousands of small programs stays bounded.
pub const DEFAULT_METRICS_PROCESSES: usize = 64;

/// Where `--metrics` listens: a TCP address (`127.0.0.1:9477`, `[::1]:9477`, `localhost:9477`)
/// or a Unix socket path (anything with a `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsAddress {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for MetricsAddress {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text.contains('/') {
            return Ok(MetricsAddress::Unix(PathBuf::from(text)));
        }
        text.to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .map(MetricsAddress::Tcp)
            .ok_or_else(|| {
                format!(
                    "{text:?} is not a metrics address: give HOST:PORT (e.g. 127.0.0.1:9477) \
                     or a Unix socket path (e.g. /run/objtier/metrics.sock)"
                )
            })
    }
}

impl std::fmt::Display for MetricsAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            MetricsAddress::Tcp(addr) => write!(f, "http://{addr}/metrics"),
            MetricsAddress::Unix(path) => write!(f, "unix:{} (GET /metrics)", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_tcp_or_a_path() {
        assert_eq!(
            "127.0.0.1:9477".parse::<MetricsAddress>(),
            Ok(MetricsAddress::Tcp("127.0.0.1:9477".parse().unwrap()))
        );
        assert_eq!(
            "/run/objtier/metrics.sock".parse::<MetricsAddress>(),
            Ok(MetricsAddress::Unix("/run/objtier/metrics.sock".into()))
        );
        assert_eq!(
            "./m.sock".parse::<MetricsAddress>(),
            Ok(MetricsAddress::Unix("./m.sock".into()))
        );
        let err = "9477".parse::<MetricsAddress>().unwrap_err();
        assert!(err.contains("HOST:PORT"), "{err}");
    }
}
