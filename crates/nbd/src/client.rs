//! An NBD client that makes a remote disk an array member: `nbd://host[:port]/export` or
//! `nbd+unix:///export?socket=PATH` (the NBD project's URI spec), served by nbdkit,
//! qemu-nbd, nbd-server or uraid itself.
//!
//! Why our own client, not libnbd: the handshake and transmission codecs are the ones the
//! server already uses and tests (`protocol.rs`); libnbd would add a C library and `unsafe`
//! bindings for the few messages a member needs (GO, READ, WRITE, FLUSH, TRIM, DISC).
//!
//! - Requests are pipelined: any number in flight per connection, each with its own cookie;
//!   one reader thread per connection matches replies to waiters. With
//!   `NBD_FLAG_CAN_MULTI_CONN` the member opens several connections and spreads requests
//!   over them (a flush on one then covers writes on all, which that flag promises).
//! - Durability: FLUSH is sent on every connection that carried a write since the last one.
//! - Connection loss: requests are retried on a new connection until the member has been
//!   unreachable for `failfast` (md's failfast, here a time); then they fail with
//!   `ENOTCONN` and the array fails the member. A reply that does not come within
//!   `reply_timeout` (a cut network sends no reset) counts as a lost connection. A write acknowledged but not yet flushed when
//!   the connection dropped may be lost with the server, so if any such write exists the
//!   next flush fails instead of pretending (the array then fails the member, and a later
//!   re-add resyncs it from the bitmap).
//! - A server error (the reply's error field) becomes an `io::Error` with that errno: EIO
//!   is a medium error the array rebuilds and rewrites; anything else fails the member.

use crate::protocol::{
    client_flags, cmd, errno, handshake_flags, info, opt, rep, transmission_flags as tflags, ClientFlags, ExportQuery, Info, OptionReply,
    OptionRequest, RequestHeader, ServerGreeting, SimpleReply, GREETING_LEN, OPTION_REPLY_HEADER_LEN, SIMPLE_REPLY_LEN,
};
use crate::transport::Stream;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Where an NBD export is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    pub endpoint: Endpoint,
    pub export: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

/// Why a string is not an NBD URI uraid can use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UriError {
    #[error("not an NBD URI (nbd://host[:port]/export or nbd+unix:///export?socket=PATH)")]
    NotNbd,
    #[error("{0} is not supported (TLS needs nbds://, which uraid does not speak yet)")]
    UnsupportedScheme(String),
    #[error("port {0:?} is not a number from 1 to 65535")]
    BadPort(String),
    #[error("nbd+unix:// needs ?socket=PATH")]
    NoSocket,
    #[error("an empty host")]
    NoHost,
    #[error("bad %-escape in {0:?}")]
    BadEscape(String),
}

/// The default NBD port (IANA).
pub const NBD_PORT: u16 = 10809;

impl NbdUri {
    /// True when `s` looks like an NBD URI at all (so callers try it before a path).
    pub fn is_uri(s: &str) -> bool {
        s.starts_with("nbd://") || s.starts_with("nbd+unix://") || s.starts_with("nbds://") || s.starts_with("nbds+unix://")
    }

    /// Parses `nbd://host[:port]/export` and `nbd+unix:///export?socket=PATH`; the export
    /// name is %-decoded, `[v6addr]` hosts are accepted.
    pub fn parse(s: &str) -> Result<NbdUri, UriError> {
        let (scheme, rest) = s.split_once("://").ok_or(UriError::NotNbd)?;
        match scheme {
            "nbd" => {
                let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
                let (path, _query) = path.split_once('?').unwrap_or((path, ""));
                let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                    let (h, after) = v6.split_once(']').ok_or(UriError::NoHost)?;
                    (h.to_string(), after.strip_prefix(':'))
                } else {
                    match authority.rsplit_once(':') {
                        Some((h, p)) => (h.to_string(), Some(p)),
                        None => (authority.to_string(), None),
                    }
                };
                if host.is_empty() {
                    return Err(UriError::NoHost);
                }
                let port = match port {
                    None | Some("") => NBD_PORT,
                    Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| UriError::BadPort(p.to_string()))?,
                };
                Ok(NbdUri { endpoint: Endpoint::Tcp { host, port }, export: percent_decode(path)? })
            }
            "nbd+unix" => {
                let rest = rest.strip_prefix('/').unwrap_or(rest);
                let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
                let socket =
                    query.split('&').find_map(|kv| kv.strip_prefix("socket=")).filter(|s| !s.is_empty()).ok_or(UriError::NoSocket)?;
                Ok(NbdUri { endpoint: Endpoint::Unix(PathBuf::from(percent_decode(socket)?)), export: percent_decode(path)? })
            }
            "nbds" | "nbds+unix" | "nbd+vsock" | "nbds+vsock" => Err(UriError::UnsupportedScheme(format!("{scheme}://"))),
            _ => Err(UriError::NotNbd),
        }
    }
}

impl std::fmt::Display for NbdUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "nbd://[{host}]:{port}/{}", self.export),
            Endpoint::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{}", self.export),
            Endpoint::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

fn percent_decode(s: &str) -> Result<String, UriError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(|| UriError::BadEscape(s.to_string()))?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| UriError::BadEscape(s.to_string()))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| UriError::BadEscape(s.to_string()))
}

/// How an NBD member behaves; the defaults suit a LAN.
#[derive(Debug, Clone, Copy)]
pub struct ClientOptions {
    /// Connections when the server allows several (`CAN_MULTI_CONN`).
    pub connections: usize,
    /// How long the member may stay unreachable before its requests fail.
    pub failfast: Duration,
    /// How long a request may wait for its reply before its connection is taken for dead
    /// (a cut network sends no reset; SCSI's default command timeout is 30 s).
    pub reply_timeout: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions { connections: 4, failfast: Duration::from_secs(10), reply_timeout: Duration::from_secs(30) }
    }
}

/// Opens a connection to `endpoint` (the server's transport type, client side).
fn connect_stream(endpoint: &Endpoint, timeout: Duration) -> io::Result<Stream> {
    match endpoint {
        Endpoint::Tcp { host, port } => {
            use std::net::ToSocketAddrs;
            let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"));
            for addr in (host.as_str(), *port).to_socket_addrs()? {
                match TcpStream::connect_timeout(&addr, timeout) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        return Ok(Stream::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(last)
        }
        Endpoint::Unix(path) => UnixStream::connect(path).map(Stream::Unix),
    }
}

fn set_timeouts(stream: &Stream, t: Option<Duration>) -> io::Result<()> {
    stream.set_read_timeout(t)?;
    stream.set_write_timeout(t)
}

/// What the handshake learned.
#[derive(Debug, Clone, Copy)]
struct Export {
    size: u64,
    flags: u16,
}

fn protocol_error(e: crate::protocol::ProtocolError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Fixed-newstyle handshake with NBD_OPT_GO.
fn handshake(stream: &mut Stream, export: &str) -> io::Result<Export> {
    let mut greeting = [0u8; GREETING_LEN];
    stream.read_exact(&mut greeting)?;
    let greeting = ServerGreeting::decode(&greeting).map_err(protocol_error)?;
    if greeting.flags & handshake_flags::FIXED_NEWSTYLE == 0 {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "the server does not speak fixed newstyle NBD"));
    }
    let no_zeroes = greeting.flags & handshake_flags::NO_ZEROES != 0;
    let mut client = client_flags::FIXED_NEWSTYLE;
    if no_zeroes {
        client |= client_flags::NO_ZEROES;
    }
    stream.write_all(&ClientFlags(client).encode())?;
    let query = ExportQuery { name: export.to_string(), info_requests: vec![info::EXPORT] };
    stream.write_all(&OptionRequest::Go(query).encode())?;
    let mut found = None;
    loop {
        let mut head = [0u8; OPTION_REPLY_HEADER_LEN];
        stream.read_exact(&mut head)?;
        let len = u32::from_be_bytes([head[16], head[17], head[18], head[19]]) as usize;
        if len > 1 << 20 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "an option reply over 1 MiB"));
        }
        let mut whole = head.to_vec();
        whole.resize(OPTION_REPLY_HEADER_LEN + len, 0);
        stream.read_exact(&mut whole[OPTION_REPLY_HEADER_LEN..])?;
        let (reply, _) = OptionReply::decode(&whole).map_err(protocol_error)?;
        if reply.option != opt::GO {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a reply to an option we did not send"));
        }
        match reply.reply_type {
            rep::INFO => {
                if let Info::Export { size, flags } = Info::decode(&reply.data).map_err(protocol_error)? {
                    found = Some(Export { size, flags });
                }
            }
            rep::ACK => {
                return found.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "NBD_OPT_GO acknowledged without the export's size"))
            }
            t if rep::is_error(t) => {
                let why = String::from_utf8_lossy(&reply.data).into_owned();
                let kind = if t == rep::ERR_UNKNOWN { io::ErrorKind::NotFound } else { io::ErrorKind::PermissionDenied };
                return Err(io::Error::new(kind, format!("the server refused export {export:?}: {why}")));
            }
            _ => {} // other replies to GO are to be ignored
        }
    }
}

/// How a request ended, as its waiter learns it.
enum Outcome {
    /// Done; the bytes a read returned.
    Data(Vec<u8>),
    /// The server answered with this errno: its verdict stands.
    ServerError(i32),
    /// The connection went before the reply came: try again on another.
    Lost(io::Error),
}

/// A reply on its way to the request that waits for it.
type Waiter = mpsc::Sender<Outcome>;

/// One connection: requests go out under `send`; a reader thread hands replies to waiters.
struct Connection {
    send: Mutex<Stream>,
    /// cookie → (bytes the reply carries, waiter)
    waiting: Arc<Mutex<HashMap<u64, (usize, Waiter)>>>,
    alive: Arc<AtomicBool>,
    /// A write went out on this connection since its last flush.
    written: AtomicBool,
}

impl Connection {
    fn open(uri: &NbdUri, timeout: Duration) -> io::Result<(Connection, Export)> {
        let mut stream = connect_stream(&uri.endpoint, timeout)?;
        set_timeouts(&stream, Some(timeout))?;
        let export = handshake(&mut stream, &uri.export)?;
        // Replies may take long (a server's flush); liveness is the socket's, not a timer's.
        set_timeouts(&stream, None)?;
        let mut reader = stream.try_clone()?;
        let waiting: Arc<Mutex<HashMap<u64, (usize, Waiter)>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let (w, a) = (waiting.clone(), alive.clone());
        std::thread::Builder::new().name("nbd-client-reader".into()).spawn(move || {
            let why = read_replies(&mut reader, &w);
            a.store(false, Ordering::SeqCst);
            // Everyone still waiting learns the connection is gone.
            for (_, (_, waiter)) in w.lock().unwrap_or_else(|e| e.into_inner()).drain() {
                let _ = waiter.send(Outcome::Lost(io::Error::new(io::ErrorKind::ConnectionAborted, why.to_string())));
            }
        })?;
        Ok((Connection { send: Mutex::new(stream), waiting, alive, written: AtomicBool::new(false) }, export))
    }

    /// Sends one request; returns the channel its reply arrives on.
    fn submit(&self, header: RequestHeader, payload: &[u8], reply_len: usize) -> io::Result<mpsc::Receiver<Outcome>> {
        let (tx, rx) = mpsc::channel();
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(header.cookie, (reply_len, tx));
        let sent = {
            let mut s = self.send.lock().unwrap_or_else(|e| e.into_inner());
            s.write_all(&header.encode()).and_then(|()| s.write_all(payload))
        };
        if let Err(e) = sent {
            self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&header.cookie);
            self.close();
            return Err(e);
        }
        Ok(rx)
    }

    fn close(&self) {
        self.alive.store(false, Ordering::SeqCst);
        self.send.lock().unwrap_or_else(|e| e.into_inner()).shutdown();
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let header = RequestHeader { flags: 0, command: cmd::DISC, cookie: 0, offset: 0, length: 0 };
        let mut s = self.send.lock().unwrap_or_else(|e| e.into_inner());
        let _ = s.write_all(&header.encode());
        s.shutdown();
    }
}

/// The reader thread's loop; returns why it stopped.
fn read_replies(stream: &mut Stream, waiting: &Mutex<HashMap<u64, (usize, Waiter)>>) -> io::Error {
    loop {
        let mut head = [0u8; SIMPLE_REPLY_LEN];
        if let Err(e) = stream.read_exact(&mut head) {
            return e;
        }
        let reply = match SimpleReply::decode(&head) {
            Ok(r) => r,
            // Structured replies are never asked for; anything else is a broken stream.
            Err(e) => return protocol_error(e),
        };
        let Some((len, waiter)) = waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&reply.cookie) else {
            return io::Error::new(io::ErrorKind::InvalidData, format!("a reply for unknown cookie {}", reply.cookie));
        };
        if reply.error != 0 {
            // No payload follows an error reply.
            let _ = waiter.send(Outcome::ServerError(server_errno(reply.error)));
            continue;
        }
        let mut data = vec![0u8; len];
        if let Err(e) = stream.read_exact(&mut data) {
            let _ = waiter.send(Outcome::Lost(io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string())));
            return e;
        }
        let _ = waiter.send(Outcome::Data(data));
    }
}

/// The NBD errno values are Linux's for the few the protocol names; anything else is EIO.
fn server_errno(e: u32) -> i32 {
    match e {
        errno::EPERM
        | errno::EIO
        | errno::ENOMEM
        | errno::EINVAL
        | errno::ENOSPC
        | errno::EOVERFLOW
        | errno::ENOTSUP
        | errno::ESHUTDOWN => e as i32,
        _ => errno::EIO as i32,
    }
}

/// An NBD export used as an array member.
pub struct NbdMember {
    uri: NbdUri,
    label: String,
    options: ClientOptions,
    size: u64,
    flags: u16,
    connections: RwLock<Vec<Arc<Connection>>>,
    next: AtomicUsize,
    cookie: AtomicU64,
    /// Writes were acknowledged on a connection that then dropped before a flush.
    unflushed_lost: AtomicBool,
    /// Serializes reconnects.
    reconnecting: Mutex<()>,
    writable: bool,
}

impl NbdMember {
    /// Connects to `uri` (the handshake on every connection it opens).
    pub fn connect(uri: &NbdUri, writable: bool, options: ClientOptions) -> io::Result<NbdMember> {
        let (first, export) = Connection::open(uri, options.failfast)?;
        if writable && export.flags & tflags::READ_ONLY != 0 {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{uri} is exported read-only")));
        }
        let mut conns = vec![Arc::new(first)];
        if export.flags & tflags::CAN_MULTI_CONN != 0 {
            for _ in 1..options.connections.max(1) {
                conns.push(Arc::new(Connection::open(uri, options.failfast)?.0));
            }
        }
        Ok(NbdMember {
            label: uri.to_string(),
            uri: uri.clone(),
            options,
            size: export.size,
            flags: export.flags,
            connections: RwLock::new(conns),
            next: AtomicUsize::new(0),
            cookie: AtomicU64::new(1),
            unflushed_lost: AtomicBool::new(false),
            reconnecting: Mutex::new(()),
            writable,
        })
    }

    /// Connections open now (several when the server allows multi-conn).
    pub fn connection_count(&self) -> usize {
        self.connections.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn pick(&self) -> Option<Arc<Connection>> {
        let conns = self.connections.read().unwrap_or_else(|e| e.into_inner());
        let live: Vec<&Arc<Connection>> = conns.iter().filter(|c| c.alive.load(Ordering::SeqCst)).collect();
        if live.is_empty() {
            return None;
        }
        Some(live[self.next.fetch_add(1, Ordering::Relaxed) % live.len()].clone())
    }

    /// Replaces dead connections; an error if the server cannot be reached now.
    fn reconnect(&self) -> io::Result<()> {
        let _one = self.reconnecting.lock().unwrap_or_else(|e| e.into_inner());
        let mut conns = self.connections.write().unwrap_or_else(|e| e.into_inner());
        let before = conns.len();
        conns.retain(|c| {
            let alive = c.alive.load(Ordering::SeqCst);
            if !alive && c.written.swap(false, Ordering::SeqCst) {
                self.unflushed_lost.store(true, Ordering::SeqCst);
            }
            alive
        });
        if conns.is_empty() {
            let (c, export) = Connection::open(&self.uri, self.options.failfast)?;
            if export.size != self.size {
                return Err(io::Error::other(format!(
                    "{}: the export's size changed from {} to {} bytes",
                    self.label, self.size, export.size
                )));
            }
            conns.push(Arc::new(c));
        }
        let want = if self.flags & tflags::CAN_MULTI_CONN != 0 { self.options.connections.max(1) } else { 1 };
        while conns.len() < want.min(before.max(1)) {
            match Connection::open(&self.uri, self.options.failfast) {
                Ok((c, _)) => conns.push(Arc::new(c)),
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// One request, retried over new connections until `failfast` has passed without one.
    fn request(&self, command: u16, flags: u16, offset: u64, length: u32, payload: &[u8], reply_len: usize) -> io::Result<Vec<u8>> {
        let started = Instant::now();
        let mut last: Option<io::Error> = None;
        loop {
            if started.elapsed() >= self.options.failfast {
                let why = last.map_or_else(String::new, |e| format!(": {e}"));
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("{} unreachable for {:?}{why}", self.label, self.options.failfast),
                ));
            }
            let Some(conn) = self.pick() else {
                if let Err(e) = self.reconnect() {
                    last = Some(e);
                    // Waiting for the server to come back: a pause, not a measurement.
                    std::thread::sleep(Duration::from_millis(50));
                }
                continue;
            };
            let header = RequestHeader { flags, command, cookie: self.cookie.fetch_add(1, Ordering::Relaxed), offset, length };
            if command == cmd::WRITE || command == cmd::TRIM || command == cmd::WRITE_ZEROES {
                conn.written.store(true, Ordering::SeqCst);
            }
            let outcome = match conn.submit(header, payload, reply_len) {
                Ok(rx) => match rx.recv_timeout(self.options.reply_timeout) {
                    Ok(outcome) => outcome,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        Outcome::Lost(io::Error::new(io::ErrorKind::TimedOut, format!("no reply within {:?}", self.options.reply_timeout)))
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        Outcome::Lost(io::Error::new(io::ErrorKind::ConnectionAborted, "the reply was lost"))
                    }
                },
                Err(e) => Outcome::Lost(e),
            };
            match outcome {
                Outcome::Data(data) => return Ok(data),
                // The server answered: its verdict stands (EIO is a medium error).
                Outcome::ServerError(code) => return Err(io::Error::from_raw_os_error(code)),
                // A flush that was sent and lost its connection may or may not have made the
                // writes durable; another flush on another connection would not cover writes
                // acknowledged on the lost one. Say so; the caller fails the member.
                Outcome::Lost(e) if command == cmd::FLUSH => {
                    conn.close();
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        format!("{}: the connection dropped during a flush: {e}", self.label),
                    ));
                }
                Outcome::Lost(e) => {
                    conn.close();
                    last = Some(e);
                }
            }
        }
    }
}

/// The largest request sent: the payload every server accepts (2^25 bytes is the protocol's
/// promise; nbdkit and qemu-nbd take 32 MiB).
const MAX_REQUEST: usize = 32 << 20;

impl uraid_engine::Member for NbdMember {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        uraid_engine::member::check_range(self, offset, buf.len())?;
        for (i, part) in buf.chunks_mut(MAX_REQUEST).enumerate() {
            let at = offset + (i * MAX_REQUEST) as u64;
            let data = self.request(cmd::READ, 0, at, part.len() as u32, &[], part.len())?;
            part.copy_from_slice(&data);
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} was opened read-only", self.label)));
        }
        uraid_engine::member::check_range(self, offset, buf.len())?;
        for (i, part) in buf.chunks(MAX_REQUEST).enumerate() {
            self.request(cmd::WRITE, 0, offset + (i * MAX_REQUEST) as u64, part.len() as u32, part, 0)?;
        }
        Ok(())
    }
    // A vectored run is one NBD request (up to MAX_REQUEST bytes), not one per buffer: a
    // full-stripe write's run of chunks would otherwise cost a round trip per chunk.
    fn read_vectored_at(&self, bufs: &mut [&mut [u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() < 2 || total > MAX_REQUEST {
            let mut at = offset;
            for b in bufs.iter_mut() {
                self.read_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        uraid_engine::member::check_range(self, offset, total)?;
        let data = self.request(cmd::READ, 0, offset, total as u32, &[], total)?;
        let mut at = 0;
        for b in bufs.iter_mut() {
            b.copy_from_slice(&data[at..at + b.len()]);
            at += b.len();
        }
        Ok(())
    }
    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if bufs.len() < 2 || total > MAX_REQUEST {
            let mut at = offset;
            for b in bufs {
                self.write_at(b, at)?;
                at += b.len() as u64;
            }
            return Ok(());
        }
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("{} was opened read-only", self.label)));
        }
        uraid_engine::member::check_range(self, offset, total)?;
        let payload = bufs.concat();
        self.request(cmd::WRITE, 0, offset, total as u32, &payload, 0).map(|_| ())
    }
    fn flush(&self) -> io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        // Writes acknowledged on a connection that died before this flush may be gone with
        // the server: say so rather than report them durable.
        for c in self.connections.read().unwrap_or_else(|e| e.into_inner()).iter() {
            if !c.alive.load(Ordering::SeqCst) && c.written.swap(false, Ordering::SeqCst) {
                self.unflushed_lost.store(true, Ordering::SeqCst);
            }
        }
        if self.unflushed_lost.swap(false, Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("{}: writes may be lost: the connection dropped before they were flushed", self.label),
            ));
        }
        if self.flags & tflags::SEND_FLUSH == 0 {
            return Ok(()); // the server writes through
        }
        let conns: Vec<Arc<Connection>> = self.connections.read().unwrap_or_else(|e| e.into_inner()).clone();
        let carried: Vec<&Arc<Connection>> = conns.iter().filter(|c| c.written.load(Ordering::SeqCst)).collect();
        if carried.is_empty() {
            return Ok(());
        }
        // One flush: with multi-conn it covers every connection's completed writes, and
        // without it there is one connection. The flags are cleared first, so a write that
        // lands meanwhile sets its own again; they come back if the flush fails.
        for c in &carried {
            c.written.store(false, Ordering::SeqCst);
        }
        let flushed = self.request(cmd::FLUSH, 0, 0, 0, &[], 0).map(|_| ());
        if flushed.is_err() {
            for c in &carried {
                c.written.store(true, Ordering::SeqCst);
            }
        }
        flushed
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.flags & tflags::SEND_TRIM == 0 {
            return Ok(()); // discard is advisory
        }
        uraid_engine::member::check_range(self, offset, usize::try_from(len).unwrap_or(usize::MAX))?;
        let mut at = 0;
        while at < len {
            let n = (len - at).min(MAX_REQUEST as u64);
            self.request(cmd::TRIM, 0, offset + at, n as u32, &[], 0)?;
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_parse_as_the_nbd_uri_spec_says() {
        let tcp = |host: &str, port, export: &str| NbdUri { endpoint: Endpoint::Tcp { host: host.into(), port }, export: export.into() };
        assert_eq!(NbdUri::parse("nbd://example.com/disk"), Ok(tcp("example.com", 10809, "disk")));
        assert_eq!(NbdUri::parse("nbd://10.0.0.2:10810/"), Ok(tcp("10.0.0.2", 10810, "")));
        assert_eq!(NbdUri::parse("nbd://h"), Ok(tcp("h", 10809, "")));
        assert_eq!(NbdUri::parse("nbd://[::1]:7000/a%20b"), Ok(tcp("::1", 7000, "a b")));
        assert_eq!(
            NbdUri::parse("nbd+unix:///m0?socket=/run/m0.sock"),
            Ok(NbdUri { endpoint: Endpoint::Unix("/run/m0.sock".into()), export: "m0".into() })
        );
        assert_eq!(NbdUri::parse("nbd+unix:///m0"), Err(UriError::NoSocket));
        assert_eq!(NbdUri::parse("nbd://h:0/x"), Err(UriError::BadPort("0".into())));
        assert_eq!(NbdUri::parse("nbd://h:99999/x"), Err(UriError::BadPort("99999".into())));
        assert_eq!(NbdUri::parse("nbd://:10809/x"), Err(UriError::NoHost));
        assert!(matches!(NbdUri::parse("nbds://h/x"), Err(UriError::UnsupportedScheme(_))));
        assert_eq!(NbdUri::parse("/dev/sda"), Err(UriError::NotNbd));
        assert_eq!(NbdUri::parse("nbd://h/%zz"), Err(UriError::BadEscape("%zz".into())));
        for s in ["nbd://example.com:10809/disk", "nbd://[::1]:7000/x", "nbd+unix:///m0?socket=/run/m0.sock"] {
            assert_eq!(NbdUri::parse(s).unwrap().to_string(), s, "display round-trips");
        }
    }
}
