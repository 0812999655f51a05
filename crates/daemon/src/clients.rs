//! Connections being served: a library's hello, or a control client's request and its reply.
//! Each is read and written without blocking, within bounds, so that no client can stall the
//! daemon's loop or make it hold more than a bounded amount of memory for it.
//!
//! The bounds, per connection: [`EXCHANGE_DEADLINE`] from `accept` to the end of its exchange
//! (the hello, or the request and the whole reply); a request line of at most
//! [`MAX_REQUEST_BYTES`]. Per user (uid): at most [`MAX_WAITING_PER_UID`] connections served
//! at once, and in all at most [`MAX_WAITING`]. A connection past a bound is dropped with a
//! warning naming its pid and uid; one that went over a length gets an error reply first. So
//! one user's connections cost the daemon at most 64 × (1 MiB + 64 KiB) of buffers, and the
//! others are served meanwhile.

use crate::attach::HungUpDuringHandshake;
use crate::daemon::Daemon;
use objtier_sys::socket::{peer_cred, recv_with_fds, PeerCred};
use objtier_wire::{CONTROL_MAGIC, HELLO_BYTES, RING_MAGIC};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// From `accept` to the end of the exchange.
pub const EXCHANGE_DEADLINE: Duration = Duration::from_secs(5);
/// Longest control request line (a `profile-start` carries the command line it runs).
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Connections of one uid served at once.
pub const MAX_WAITING_PER_UID: usize = 64;
/// Connections served at once, all users together.
pub const MAX_WAITING: usize = 1024;
/// Bytes read from a control client at a time.
const READ_CHUNK: usize = 64 << 10;
/// How long accepting pauses when the daemon is out of file descriptors (the listener would
/// otherwise stay readable and the loop spin).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// One connection being served.
pub(crate) struct Client {
    stream: UnixStream,
    /// Who connected (`SO_PEERCRED`); None if the kernel could not say.
    cred: Option<PeerCred>,
    deadline: Instant,
    state: State,
}

enum State {
    /// Nothing decisive read yet: the first bytes, and any descriptors passed with them.
    Opening { bytes: Vec<u8>, fds: Vec<OwnedFd> },
    /// A control client's request so far (after its magic).
    Request(Vec<u8>),
    /// The reply, and how much of it was sent.
    Reply { bytes: Vec<u8>, sent: usize },
}

/// What one step of a connection came to.
enum Step {
    /// Waiting for more from the peer (or for room to write to it).
    Wait(Client),
    /// Served, refused or gone: the connection is closed.
    Done,
}

/// The connections being served, and whether accepting is paused.
#[derive(Default)]
pub(crate) struct Clients {
    waiting: Vec<Client>,
    accept_paused_until: Option<Instant>,
}

impl Clients {
    /// The poll entries: the listener first (unless accepting is paused), then one per
    /// connection, in [`Clients::after_poll`]'s order.
    pub(crate) fn poll_fds(&self, listener: &UnixListener, fds: &mut Vec<libc::pollfd>) {
        let paused = self.accept_paused_until.is_some_and(|t| Instant::now() < t);
        fds.push(libc::pollfd {
            fd: if paused { -1 } else { listener.as_raw_fd() },
            events: libc::POLLIN,
            revents: 0,
        });
        fds.extend(self.waiting.iter().map(|c| libc::pollfd {
            fd: c.stream.as_raw_fd(),
            events: match c.state {
                State::Reply { .. } => libc::POLLOUT,
                _ => libc::POLLIN,
            },
            revents: 0,
        }));
    }

    /// Entries [`Clients::poll_fds`] adds.
    pub(crate) fn poll_len(&self) -> usize {
        1 + self.waiting.len()
    }

    /// When the loop must wake for them next: the first deadline, or the end of a pause.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let first = self.waiting.iter().map(|c| c.deadline).min();
        match (first, self.accept_paused_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Raises the daemon's soft limit on open descriptors to its hard limit: each attached process
/// holds two (its socket and its pidfd), and a thousand processes attaching at once must not
/// find the daemon at the usual soft limit of 1,024.
pub(crate) fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
                tracing::debug!(
                    "cannot raise the descriptor limit from {}: {}",
                    limit.rlim_cur,
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

impl Daemon {
    /// Serves the connections `fds` (from [`Clients::poll_fds`]) say are ready, drops those past
    /// their deadline, and accepts new ones, each served at once as far as it has spoken.
    pub(crate) fn serve_clients(
        &mut self,
        clients: &mut Clients,
        listener: &UnixListener,
        fds: &[libc::pollfd],
    ) {
        let now = Instant::now();
        let waiting = std::mem::take(&mut clients.waiting);
        for (i, client) in waiting.into_iter().enumerate() {
            if fds[1 + i].revents != 0 {
                if let Step::Wait(client) = self.step(client) {
                    clients.waiting.push(client);
                }
            } else if now >= client.deadline {
                tracing::warn!(
                    "dropped a connection from {}: {} within {} s",
                    who(&client.cred),
                    match client.state {
                        State::Opening { .. } => "it said nothing",
                        State::Request(_) => "its request did not end",
                        State::Reply { .. } => "it did not read its reply",
                    },
                    EXCHANGE_DEADLINE.as_secs()
                );
            } else {
                clients.waiting.push(client);
            }
        }
        if clients.accept_paused_until.is_some_and(|t| now < t) {
            return;
        }
        clients.accept_paused_until = None;
        loop {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // EMFILE or ENFILE: the connections wait in the backlog until some close.
                    tracing::warn!(
                        "accept failed: {e}; accepting again in {} ms",
                        ACCEPT_PAUSE.as_millis()
                    );
                    clients.accept_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                    break;
                }
            };
            let cred = peer_cred(&stream).ok();
            let uid = cred.map(|c| c.uid);
            let of_uid = clients
                .waiting
                .iter()
                .filter(|c| c.cred.map(|c| c.uid) == uid)
                .count();
            if of_uid >= MAX_WAITING_PER_UID || clients.waiting.len() >= MAX_WAITING {
                tracing::warn!(
                    "dropped a connection from {}: {} connections are being served already \
                     (at most {MAX_WAITING_PER_UID} per user and {MAX_WAITING} in all)",
                    who(&cred),
                    if of_uid >= MAX_WAITING_PER_UID {
                        of_uid
                    } else {
                        clients.waiting.len()
                    },
                );
                continue;
            }
            if let Err(e) = stream.set_nonblocking(true) {
                tracing::warn!("dropped a connection from {}: {e}", who(&cred));
                continue;
            }
            let client = Client {
                stream,
                cred,
                deadline: Instant::now() + EXCHANGE_DEADLINE,
                state: State::Opening {
                    bytes: Vec::new(),
                    fds: Vec::new(),
                },
            };
            // Most clients have spoken by the time they are accepted: serve them now.
            if let Step::Wait(client) = self.step(client) {
                clients.waiting.push(client);
            }
        }
    }

    /// Moves one connection on as far as what it sent (or the room to write to it) allows.
    fn step(&mut self, mut client: Client) -> Step {
        loop {
            client.state = match client.state {
                State::Opening { mut bytes, mut fds } => {
                    // The hello's descriptors come with its first bytes: read with room for
                    // them, and never more than a hello.
                    let mut buf = [0u8; HELLO_BYTES];
                    let want = HELLO_BYTES - bytes.len();
                    match recv_with_fds(&client.stream, &mut buf[..want], 2) {
                        Ok((0, _)) => {
                            tracing::debug!("{} hung up before saying anything", who(&client.cred));
                            return Step::Done;
                        }
                        Ok((n, more)) => {
                            bytes.extend_from_slice(&buf[..n]);
                            fds.extend(more);
                            fds.truncate(2);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            client.state = State::Opening { bytes, fds };
                            return Step::Wait(client);
                        }
                        Err(e) => {
                            tracing::warn!("dropped a connection from {}: {e}", who(&client.cred));
                            return Step::Done;
                        }
                    }
                    if bytes.len() < 8 {
                        State::Opening { bytes, fds }
                    } else {
                        let magic = u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
                        match magic {
                            CONTROL_MAGIC => {
                                // The request may have come whole with the magic.
                                let mut request = bytes.split_off(8);
                                match request.iter().position(|&b| b == b'\n') {
                                    Some(end) => {
                                        request.truncate(end);
                                        self.reply_to(&request, &client.cred)
                                    }
                                    None => State::Request(request),
                                }
                            }
                            RING_MAGIC if bytes.len() < HELLO_BYTES => {
                                State::Opening { bytes, fds }
                            }
                            RING_MAGIC => {
                                let hello: [u8; HELLO_BYTES] =
                                    bytes[..].try_into().unwrap_or([0; HELLO_BYTES]);
                                self.attach_client(client.stream, client.cred, &hello, fds);
                                return Step::Done;
                            }
                            _ => {
                                tracing::warn!(
                                    "refused a connection from {}: it is neither a process nor \
                                     a control client",
                                    who(&client.cred)
                                );
                                return Step::Done;
                            }
                        }
                    }
                }
                State::Request(mut request) => match read_some(&mut client.stream, &mut request) {
                    Reading::Again => {
                        client.state = State::Request(request);
                        return Step::Wait(client);
                    }
                    Reading::Failed(e) => {
                        tracing::warn!("dropped a control client, {}: {e}", who(&client.cred));
                        return Step::Done;
                    }
                    Reading::Line(end) => {
                        request.truncate(end);
                        self.reply_to(&request, &client.cred)
                    }
                    Reading::Closed if request.is_empty() => return Step::Done,
                    // A request without its newline, ended by the peer's shutdown.
                    Reading::Closed => self.reply_to(&request, &client.cred),
                    Reading::TooLong => {
                        tracing::warn!(
                            "dropped a control client, {}: its request passed {} KiB without \
                             ending its line",
                            who(&client.cred),
                            MAX_REQUEST_BYTES >> 10
                        );
                        let reply = serde_json::json!({"error": format!(
                            "request longer than {} KiB: a control request is one JSON line",
                            MAX_REQUEST_BYTES >> 10
                        )});
                        let mut bytes = reply.to_string().into_bytes();
                        bytes.push(b'\n');
                        let _ = client.stream.write(&bytes);
                        return Step::Done;
                    }
                },
                State::Reply { bytes, mut sent } => {
                    while sent < bytes.len() {
                        match client.stream.write(&bytes[sent..]) {
                            Ok(0) => return Step::Done,
                            Ok(n) => sent += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                client.state = State::Reply { bytes, sent };
                                return Step::Wait(client);
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            // The client hung up before its answer: not the daemon's concern.
                            Err(e) => {
                                tracing::debug!("control client {}: {e}", who(&client.cred));
                                return Step::Done;
                            }
                        }
                    }
                    return Step::Done;
                }
            };
        }
    }

    /// The reply state for one request.
    fn reply_to(&mut self, request: &[u8], cred: &Option<PeerCred>) -> State {
        let peer = cred.ok_or_else(|| std::io::Error::other("SO_PEERCRED failed"));
        let line = String::from_utf8_lossy(request);
        let reply = self.answer(&line, &peer);
        if let Some(error) = reply.get("error").and_then(|e| e.as_str()) {
            tracing::info!("control request from {} refused: {error}", who(cred));
        }
        let mut bytes = serde_json::to_vec(&reply).unwrap_or_default();
        bytes.push(b'\n');
        State::Reply { bytes, sent: 0 }
    }

    /// Attaches the process that sent `hello` (and its descriptors) on `stream`.
    fn attach_client(
        &mut self,
        stream: UnixStream,
        cred: Option<PeerCred>,
        hello: &[u8; HELLO_BYTES],
        fds: Vec<OwnedFd>,
    ) {
        let Some(cred) = cred else {
            tracing::warn!("refused a process: SO_PEERCRED failed");
            return;
        };
        match self.attach(stream, cred, hello, fds) {
            Ok(()) => {}
            // Nothing to tell the user: the process exited or exec'd (the new program attaches
            // on its own), as short commands under `objtier run` do.
            Err(e) if e.is::<HungUpDuringHandshake>() => tracing::debug!("{e}"),
            Err(e) => tracing::warn!("refused a process: {e:#}"),
        }
    }
}

/// What reading a control client gave.
enum Reading {
    /// The request line ends at this index.
    Line(usize),
    /// Nothing more for now.
    Again,
    /// The peer closed its end.
    Closed,
    /// Past [`MAX_REQUEST_BYTES`] without a newline.
    TooLong,
    Failed(std::io::Error),
}

/// Reads what `stream` has into `request` (at most [`MAX_REQUEST_BYTES`] in all).
fn read_some(stream: &mut UnixStream, request: &mut Vec<u8>) -> Reading {
    loop {
        let start = request.len();
        if start >= MAX_REQUEST_BYTES {
            return Reading::TooLong;
        }
        let room = READ_CHUNK.min(MAX_REQUEST_BYTES + 1 - start);
        // Exactly what is needed: doubling would let a long request hold twice the bound.
        request.reserve_exact(room);
        request.resize(start + room, 0);
        let result = stream.read(&mut request[start..]);
        let n = match result {
            Ok(n) => n,
            Err(e) => {
                request.truncate(start);
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return Reading::Again,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => return Reading::Failed(e),
                }
            }
        };
        request.truncate(start + n);
        if n == 0 {
            return Reading::Closed;
        }
        if let Some(i) = request[start..].iter().position(|&b| b == b'\n') {
            return Reading::Line(start + i);
        }
    }
}

/// "pid P (uid U)", for the log.
fn who(cred: &Option<PeerCred>) -> String {
    match cred {
        Some(c) => format!("pid {} (uid {})", c.pid, c.uid),
        None => "a peer of unknown credentials".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request line that never ends is cut off at the bound, and never held whole.
    #[test]
    fn a_request_is_read_within_its_bound() {
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 1 << 16];
            for _ in 0..64 {
                if theirs.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let mut request = Vec::new();
        let reading = loop {
            match read_some(&mut ours, &mut request) {
                Reading::Again => std::thread::sleep(Duration::from_millis(1)),
                other => break other,
            }
        };
        assert!(matches!(reading, Reading::TooLong));
        assert!(request.capacity() <= MAX_REQUEST_BYTES + READ_CHUNK);
        drop(ours);
        writer.join().unwrap();

        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"{\"cmd\":\"status\"}\nmore").unwrap();
        let mut request = Vec::new();
        assert!(matches!(
            read_some(&mut ours, &mut request),
            Reading::Line(16)
        ));
    }

    /// A request that comes whole with its magic, in one write, is answered at once.
    #[test]
    fn a_request_sent_with_its_magic_is_answered() {
        let sys = tempfile::tempdir().unwrap();
        let mut config = crate::config::DaemonConfig::new(sys.path().join("sock"));
        config.sys_root = sys.path().to_owned();
        let mut d = Daemon::on_fake_kernel(
            config,
            objtier_sys::topology::Topology::two_tiers(1 << 30, 1 << 30, 1 << 32),
        );
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut hello = CONTROL_MAGIC.to_le_bytes().to_vec();
        hello.extend_from_slice(b"{\"cmd\":\"status\"}\n");
        theirs.write_all(&hello).unwrap();
        let client = Client {
            cred: peer_cred(&ours).ok(),
            stream: ours,
            deadline: Instant::now() + EXCHANGE_DEADLINE,
            state: State::Opening {
                bytes: Vec::new(),
                fds: Vec::new(),
            },
        };
        assert!(matches!(d.step(client), Step::Done));
        let mut reply = String::new();
        theirs.read_to_string(&mut reply).unwrap();
        assert!(
            reply.contains("\"processes\"") && reply.ends_with('\n'),
            "{reply}"
        );
    }
}
