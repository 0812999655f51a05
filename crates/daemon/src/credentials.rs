//! What a connecting process may claim about itself, checked against what the kernel says: the
//! pid in its hello, and the ring it passes. A process can only ever be served as itself.

use crate::daemon::Daemon;
use anyhow::bail;
use objtier_sys::ring::RingMapping;
use objtier_sys::socket::PeerCred;

impl Daemon {
    /// The hello's pid must be the peer's own, as the kernel gave it (`SO_PEERCRED`), in the
    /// daemon's pid namespace or in any namespace the process is nested in (`NSpid` of its
    /// `/proc/PID/status`: a containerised library sees its pid there).
    pub(crate) fn check_claimed_pid(&self, cred: PeerCred, claimed: u32) -> anyhow::Result<()> {
        if claimed == cred.pid {
            return Ok(());
        }
        let status = self
            .config
            .proc_root
            .join(cred.pid.to_string())
            .join("status");
        let pids = match std::fs::read_to_string(&status) {
            Ok(text) => ns_pids(&text),
            Err(e) => {
                tracing::debug!(pid = cred.pid, "cannot read {}: {e}", status.display());
                Vec::new()
            }
        };
        if !pids.contains(&claimed) {
            bail!(
                "pid {} (uid {}) claimed pid {claimed} in its hello: a process attaches as \
                 itself only (the kernel's SO_PEERCRED says who it is)",
                cred.pid,
                cred.uid
            );
        }
        Ok(())
    }

    /// The ring must be a memfd the peer's user owns, and not the ring of a process attached
    /// already (a descriptor inherited or passed on is another process's ring).
    pub(crate) fn check_ring_is_its_own(
        &self,
        cred: PeerCred,
        ring: &RingMapping,
    ) -> anyhow::Result<()> {
        let file = ring.file();
        if file.uid != cred.uid {
            bail!(
                "pid {} (uid {}) passed a ring whose memfd belongs to uid {}: a process attaches \
                 with a ring of its own",
                cred.pid,
                cred.uid,
                file.uid
            );
        }
        if let Some(other) = self.processes.values().find(|p| {
            let f = p.ring.file();
            (f.dev, f.ino) == (file.dev, file.ino)
        }) {
            bail!(
                "pid {} (uid {}) passed the ring of pid {}, attached already: a process attaches \
                 with a ring of its own",
                cred.pid,
                cred.uid,
                other.pid
            );
        }
        Ok(())
    }
}

/// The pids of a `/proc/PID/status`'s `NSpid` line, outermost namespace first.
fn ns_pids(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_lists_the_pid_in_every_namespace() {
        let text = "Name:\tapp\nTgid:\t4242\nNSpid:\t4242\t17\t1\nPPid:\t1\n";
        assert_eq!(ns_pids(text), [4242, 17, 1]);
        assert!(ns_pids("Name:\tapp\n").is_empty());
    }

    fn daemon(root: &std::path::Path) -> Daemon {
        let mut config = crate::config::DaemonConfig::new(root.join("sock"));
        config.sys_root = root.to_owned();
        config.proc_root = root.join("proc");
        Daemon::on_fake_kernel(
            config,
            objtier_sys::topology::Topology::two_tiers(1 << 30, 1 << 30, 1 << 32),
        )
    }

    /// A hello may claim the peer's pid, or its pid in a nested namespace; no other.
    #[test]
    fn a_hello_claims_only_the_peers_own_pid() {
        let root = tempfile::tempdir().unwrap();
        let d = daemon(root.path());
        std::fs::create_dir_all(root.path().join("proc/4242")).unwrap();
        std::fs::write(root.path().join("proc/4242/status"), "NSpid:\t4242\t17\n").unwrap();
        let cred = PeerCred {
            pid: 4242,
            uid: 1000,
            gid: 1000,
        };
        d.check_claimed_pid(cred, 4242).unwrap();
        d.check_claimed_pid(cred, 17).unwrap();
        let e = d.check_claimed_pid(cred, 1).unwrap_err().to_string();
        assert!(
            e.contains("claimed pid 1") && e.contains("attaches as itself only"),
            "{e}"
        );
        let gone = PeerCred { pid: 5, ..cred };
        assert!(d.check_claimed_pid(gone, 4242).is_err());
    }

    /// A ring must be a memfd of the peer's user, and not one already attached.
    #[test]
    fn a_ring_of_another_user_or_process_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let mut d = daemon(root.path());
        // SAFETY: geteuid has no failure mode.
        let me = unsafe { libc::geteuid() };
        let cred = PeerCred {
            pid: 7,
            uid: me,
            gid: 0,
        };
        let (memfd, len) = RingMapping::create_memfd(64, 7).unwrap();
        let ring = RingMapping::map(&memfd, len).unwrap();
        d.check_ring_is_its_own(cred, &ring).unwrap();
        let other = PeerCred {
            uid: me + 1,
            ..cred
        };
        let e = d
            .check_ring_is_its_own(other, &ring)
            .unwrap_err()
            .to_string();
        assert!(e.contains("whose memfd belongs to uid"), "{e}");
        let (mut p, _peer) = crate::process::Process::synthetic(1, 7, 64, 1 << 20).unwrap();
        p.ring = ring;
        d.processes.insert(1, p);
        // The same memfd passed again, as by a second process handed the first one's ring.
        let second = RingMapping::map(&memfd, len).unwrap();
        let e = d
            .check_ring_is_its_own(cred, &second)
            .unwrap_err()
            .to_string();
        assert!(e.contains("passed the ring of pid 7"), "{e}");
    }
}
