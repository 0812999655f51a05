//! The control socket's requests (`objtier status`, `place`, `run`'s hold, `profile`): one
//! JSON line in, one JSON line out, each answered from everything the processes have said
//! (`clients.rs` reads and writes them). Who asks is the connection's `SO_PEERCRED`: a
//! non-root user sees and steers only their own processes.

use crate::daemon::Daemon;
use objtier_sys::socket::PeerCred;
use serde_json::{json, Value};

/// The commands a control client may send (in the order an unknown one's error lists them).
pub const COMMANDS: &[&str] = &[
    "status",
    "place",
    "hold",
    "profile-start",
    "profile-finish",
    "profile-snapshot",
];

impl Daemon {
    /// The reply to one request `line` from `peer`: the command's answer, or `{"error": ...}`
    /// saying what is wrong with the request.
    pub fn answer(&mut self, line: &str, peer: &std::io::Result<PeerCred>) -> Value {
        // Answer from everything the processes have said (their rings are drained on doorbells
        // and deadlines, not continuously): a site just described can be placed, a status
        // counts the objects just allocated.
        for p in self.processes.values_mut() {
            p.drain();
        }
        let request = match serde_json::from_str::<Value>(line) {
            Ok(request) => request,
            Err(e) => return json!({"error": format!("malformed request: {e}")}),
        };
        let peer_uid = peer.as_ref().map(|c| c.uid).ok();
        // A daemon of one user answers that user, and root.
        if let Some(uid) = peer_uid.filter(|&uid| self.euid != 0 && uid != 0 && uid != self.euid) {
            return json!({ "error": format!(
                "this daemon runs as uid {} and answers only that user and root, not uid {uid}: \
                 use a daemon of your own (another --socket) or the system's",
                self.euid
            )});
        }
        let answer = match request.get("cmd").and_then(|c| c.as_str()) {
            // Root sees every process; anyone else only their own.
            Some("status") => match peer_uid {
                Some(uid) => Ok(crate::status::status_json(self, (uid != 0).then_some(uid))),
                None => Err("cannot tell who asked (SO_PEERCRED failed)".to_string()),
            },
            Some("place") => self.place(&request, peer_uid),
            Some("hold") => self.hold(peer),
            Some("profile-start") => self.profile_start(&request, peer_uid),
            Some("profile-snapshot") => self.profile_snapshot(&request, peer_uid),
            Some("profile-finish") => self.profile_finish(&request, peer_uid),
            Some(other) => Err(format!(
                "unknown command {other:?}; this daemon knows: {}",
                COMMANDS.join(", ")
            )),
            None => Err("request has no \"cmd\"".to_string()),
        };
        answer.unwrap_or_else(|e| json!({ "error": e }))
    }

    /// `{"cmd":"hold"}`: the asking process runs a program here soon, and an idle daemon waits
    /// for it.
    fn hold(&mut self, peer: &std::io::Result<PeerCred>) -> Result<Value, String> {
        match peer {
            Ok(cred) if self.held_pids.len() < 4096 => {
                self.held_pids.push(cred.pid);
                Ok(json!({ "held": cred.pid }))
            }
            Ok(_) => Err("too many commands held".into()),
            Err(e) => Err(format!("SO_PEERCRED: {e}")),
        }
    }

    /// `{"cmd":"place","pid":P,"site":"0x..."|N,"tier":T|null}`: new objects of the site start in
    /// tier T (null: wherever first touch puts them). Only root or the process's owner may.
    fn place(&mut self, request: &Value, peer_uid: Option<u32>) -> Result<Value, String> {
        let pid = request
            .get("pid")
            .and_then(|v| v.as_u64())
            .ok_or("\"pid\" (a number) is required")? as u32;
        let site = match request.get("site") {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) => {
                let hex = s.trim_start_matches("0x").trim_start_matches("0X");
                u64::from_str_radix(hex, 16).ok()
            }
            _ => None,
        }
        .filter(|&s| s != 0)
        .ok_or("\"site\" is required: a site id as `objtier status --json` lists it (hex string or number)")?;
        let tiers = self.topology.tiers.len();
        let tier = match request.get("tier") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|&t| (t as usize) < tiers).ok_or(format!(
                "\"tier\" must be a tier number below {tiers}, or null"
            ))? as u32),
        };
        let process = self
            .processes
            .values_mut()
            .filter(|p| p.pid == pid)
            .max_by_key(|p| p.id)
            .ok_or(format!("pid {pid} is not attached to this daemon"))?;
        if peer_uid != Some(0) && peer_uid != Some(process.uid) {
            return Err(format!(
                "pid {pid} belongs to uid {}: only it or root may place its objects",
                process.uid
            ));
        }
        if !process.place_site(site, tier) {
            return Err(format!(
                "the placement table of pid {pid} is full around this site; clear another first"
            ));
        }
        tracing::info!(pid, site = format_args!("{site:#x}"), ?tier, "site placed");
        Ok(json!({ "ok": true, "pid": pid, "site": format!("{site:#018x}"), "tier": tier }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use objtier_sys::topology::Topology;

    fn daemon(sys: &tempfile::TempDir) -> Daemon {
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        Daemon::on_fake_kernel(config, Topology::two_tiers(1 << 30, 1 << 30, 1 << 32))
    }

    /// A bad request is answered with an error that says what is wrong; a status is answered.
    #[test]
    fn requests_are_answered_or_refused_with_a_reason() {
        let sys = tempfile::tempdir().unwrap();
        let mut d = daemon(&sys);
        let me = Ok(PeerCred {
            pid: 1,
            uid: 0,
            gid: 0,
        });
        let error = |reply: Value| reply["error"].as_str().unwrap_or_default().to_string();
        assert!(error(d.answer("{", &me)).starts_with("malformed request"));
        assert_eq!(error(d.answer("{}", &me)), "request has no \"cmd\"");
        let unknown = error(d.answer(r#"{"cmd":"reboot"}"#, &me));
        assert!(unknown.contains("\"reboot\"") && unknown.contains(&COMMANDS.join(", ")));
        assert!(d.answer(r#"{"cmd":"status"}"#, &me)["error"].is_null());
        assert_eq!(d.answer(r#"{"cmd":"hold"}"#, &me)["held"], 1);
        let nobody = Err(std::io::Error::from_raw_os_error(libc::ENOTCONN));
        assert!(error(d.answer(r#"{"cmd":"hold"}"#, &nobody)).starts_with("SO_PEERCRED"));
    }

    /// A user sees and places only their own processes; root sees and places all.
    #[test]
    fn a_user_sees_and_steers_only_their_own_processes() {
        let sys = tempfile::tempdir().unwrap();
        let mut d = daemon(&sys);
        for (id, pid, uid) in [(1, 100, 1000), (2, 200, 2000)] {
            let (mut p, _peer) = crate::process::Process::synthetic(id, pid, 64, 1 << 20).unwrap();
            p.uid = uid;
            d.processes.insert(id, p);
        }
        let as_uid = |uid| {
            Ok(PeerCred {
                pid: 1,
                uid,
                gid: uid,
            })
        };
        let pids = |reply: Value| -> Vec<u64> {
            reply["processes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["pid"].as_u64().unwrap())
                .collect()
        };
        assert_eq!(pids(d.answer(r#"{"cmd":"status"}"#, &as_uid(1000))), [100]);
        assert_eq!(pids(d.answer(r#"{"cmd":"status"}"#, &as_uid(2000))), [200]);
        assert_eq!(
            pids(d.answer(r#"{"cmd":"status"}"#, &as_uid(0))),
            [100, 200]
        );
        let place = r#"{"cmd":"place","pid":100,"site":"0x10","tier":0}"#;
        let refused = d.answer(place, &as_uid(2000));
        assert!(refused["error"]
            .as_str()
            .unwrap()
            .contains("only it or root may place its objects"));
        assert!(d.answer(place, &as_uid(1000))["error"].is_null());
        assert!(d.answer(place, &as_uid(0))["error"].is_null());
        let nobody = Err(std::io::Error::from_raw_os_error(libc::ENOTCONN));
        assert!(d.answer(r#"{"cmd":"status"}"#, &nobody)["error"].is_string());
    }
}
