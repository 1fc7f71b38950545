//! The NBD server: an accept loop, one thread per connection for the handshake and for
//! reading requests, and a small worker pool per connection so that many requests on one
//! connection run against the array at once (the array takes its own stripe locks).
//! Replies go out whole, one at a time, through a writer lock, in completion order.
//!
//! Defensive rules, because the client is untrusted: every read polls `stop` and has a
//! time-out; the handshake has a deadline; option data and request payloads are bounded
//! before anything is allocated; the payload bytes pinned by one connection's in-flight
//! requests are bounded; a malformed message ends the connection, never the server.

use crate::protocol::{self, errno, handshake_flags, info, opt, rep, ExportLimits, Info, OptionReply, Validated};
use crate::protocol::{ClientFlags, ExportNameReply, OptionHeader, OptionRequest, RequestHeader, ServerEntry, SimpleReply};
use crate::transport::{Listener, Stream};
use std::io::{self, Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uraid_engine::{EngineError, Volume};
use uraid_parity::buffer::AlignedBuf;

/// One array offered to clients under a name.
#[derive(Clone)]
pub struct Export {
    /// What clients ask for (`nbd://host/NAME`); the empty name reaches the only export
    /// when there is exactly one.
    pub name: String,
    /// Shown by `nbdinfo --list`.
    pub description: String,
    pub array: Arc<dyn Volume>,
    /// Refuse writes even if the array is writable.
    pub read_only: bool,
}

impl Export {
    /// An export named after the array, read-only if the array is.
    pub fn new(array: Arc<dyn Volume>) -> Export {
        let description = format!("uraid {} array {}, {} bytes", array.level(), array.name(), array.size_bytes());
        Export { name: array.name(), description, read_only: !array.is_writable(), array }
    }

    fn limits(&self) -> ExportLimits {
        ExportLimits {
            size: self.array.size_bytes(),
            read_only: self.read_only || !self.array.is_writable(),
            max_payload: protocol::MAX_PAYLOAD,
        }
    }
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export")
            .field("name", &self.name)
            .field("size", &self.array.size_bytes())
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// Tunables. The defaults suit `uraid serve`; tests shorten the time-outs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Threads per connection executing requests against the array: how many of a
    /// client's requests run at once. 32 matches the queue depths clients use (fio's
    /// benchmarks, the kernel's nbd driver); with 4, a 4K random-write load at depth 32
    /// ran at 4 and RAID5/6 reached about 60% of what the members could do
    /// (scripts/bench-nbd-randwrite).
    pub workers_per_connection: usize,
    /// Connections beyond this are closed at once (each costs 1 + workers threads).
    pub max_connections: usize,
    /// Payload bytes (read buffers and write data) one connection may hold in flight;
    /// the reader stops taking requests until replies free some. At least MAX_PAYLOAD.
    pub inflight_bytes_max: u64,
    /// The whole handshake must finish within this, or the connection is dropped.
    pub handshake_timeout: Duration,
    /// A client that does not take its replies for this long is dropped.
    pub write_timeout: Duration,
    /// How often blocked reads and the accept loop look at `stop`.
    pub poll_interval: Duration,
    /// Option requests allowed in one handshake (a client looping on options is dropped).
    pub max_options: usize,
    /// Print one line per connection and per refused client to stderr.
    pub verbose: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            workers_per_connection: 32,
            max_connections: 64,
            inflight_bytes_max: 2 * protocol::MAX_PAYLOAD as u64,
            handshake_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(100),
            max_options: 1024,
            verbose: false,
        }
    }
}

/// Option data larger than this is skipped unread and answered `NBD_REP_ERR_TOO_BIG`: the
/// largest legitimate option (NBD_OPT_GO: 4-byte length, a 4096-byte name, a count and a
/// few info requests) is far smaller.
const MAX_OPTION_DATA: u32 = 16 * 1024;
/// Requests queued between the reader and the workers (their payloads are bounded by the
/// in-flight budget; this bounds the count of payload-less ones).
const QUEUE_DEPTH: usize = 64;
/// Accept polls more often than reads: a new client waits for the next poll.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// Serves `exports` on `listener` until `stop` becomes true, then waits for connections
/// to finish their in-flight requests (at most about one poll interval plus the slowest
/// request) and returns.
pub struct NbdServer {
    listener: Listener,
    exports: Arc<Vec<Export>>,
    stop: Arc<AtomicBool>,
    config: ServerConfig,
}

impl NbdServer {
    pub fn new(listener: Listener, exports: Vec<Export>, stop: Arc<AtomicBool>) -> NbdServer {
        NbdServer { listener, exports: Arc::new(exports), stop, config: ServerConfig::default() }
    }

    pub fn with_config(mut self, config: ServerConfig) -> NbdServer {
        self.config = config;
        self
    }

    pub fn listener(&self) -> &Listener {
        &self.listener
    }

    /// Runs the accept loop on the calling thread. Errors only for a bad export list or a
    /// listener that cannot be made non-blocking; per-connection trouble is contained.
    pub fn run(self) -> io::Result<()> {
        check_exports(&self.exports)?;
        // Non-blocking accept so `stop` is seen within ACCEPT_POLL.
        self.listener.set_nonblocking(true)?;
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        let counter = AtomicU64::new(0);
        while !self.stop.load(Ordering::Acquire) {
            conns.retain(|h| !h.is_finished());
            match self.listener.accept() {
                Ok(stream) => {
                    if conns.len() >= self.config.max_connections {
                        if self.config.verbose {
                            eprintln!("nbd: refusing a client: {} connections open", conns.len());
                        }
                        stream.shutdown();
                        continue;
                    }
                    let id = counter.fetch_add(1, Ordering::Relaxed);
                    let exports = self.exports.clone();
                    let stop = self.stop.clone();
                    let config = self.config.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("nbd-conn-{id}"))
                        .spawn(move || serve_connection(stream, &exports, &stop, &config, id));
                    match spawned {
                        Ok(h) => conns.push(h),
                        Err(e) => eprintln!("nbd: cannot start a connection thread: {e}"),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_POLL),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE, ECONNABORTED…: transient for a server; keep listening.
                    if self.config.verbose {
                        eprintln!("nbd: accept: {e}");
                    }
                    std::thread::sleep(ACCEPT_POLL);
                }
            }
        }
        for h in conns {
            let _ = h.join();
        }
        Ok(())
    }
}

/// `NbdServer::new(listener, exports, stop).run()`.
pub fn serve(listener: Listener, exports: Vec<Export>, stop: Arc<AtomicBool>) -> io::Result<()> {
    NbdServer::new(listener, exports, stop).run()
}

fn check_exports(exports: &[Export]) -> io::Result<()> {
    let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
    for (i, e) in exports.iter().enumerate() {
        if !protocol::is_valid_string(&e.name) {
            return bad(format!("export name {:?} is not a valid NBD string", e.name));
        }
        if exports[..i].iter().any(|o| o.name == e.name) {
            return bad(format!("two exports named {:?}", e.name));
        }
    }
    Ok(())
}

/// Why a connection ended.
#[derive(Debug)]
enum Halt {
    /// The client closed the socket (or sent NBD_OPT_ABORT / NBD_CMD_DISC).
    Closed,
    /// The server is stopping.
    Stopped,
    /// The handshake deadline passed.
    TimedOut,
    /// The client broke the protocol: hard disconnect.
    Protocol(String),
    Io(io::Error),
}

impl std::fmt::Display for Halt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Halt::Closed => write!(f, "closed by the client"),
            Halt::Stopped => write!(f, "server stopping"),
            Halt::TimedOut => write!(f, "handshake timed out"),
            Halt::Protocol(why) => write!(f, "protocol violation: {why}"),
            Halt::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for Halt {
    fn from(e: io::Error) -> Halt {
        Halt::Io(e)
    }
}

/// Fills `buf`, riding over read time-outs (which exist only so `stop` and `deadline`
/// are looked at) without losing bytes already read.
fn read_full(s: &mut Stream, buf: &mut [u8], stop: &AtomicBool, deadline: Option<Instant>) -> Result<(), Halt> {
    let mut at = 0;
    while at < buf.len() {
        if stop.load(Ordering::Acquire) {
            return Err(Halt::Stopped);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Halt::TimedOut);
        }
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(Halt::Closed),
            Ok(n) => at += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(Halt::Io(e)),
        }
    }
    Ok(())
}

/// Reads and throws away `n` bytes through a small buffer: keeps the stream in step after
/// refusing a request without allocating what the client claimed.
fn drain(s: &mut Stream, mut n: u64, stop: &AtomicBool, deadline: Option<Instant>) -> Result<(), Halt> {
    let mut scratch = [0u8; 64 * 1024];
    while n > 0 {
        let k = n.min(scratch.len() as u64) as usize;
        read_full(s, &mut scratch[..k], stop, deadline)?;
        n -= k as u64;
    }
    Ok(())
}

fn serve_connection(stream: Stream, exports: &[Export], stop: &AtomicBool, config: &ServerConfig, id: u64) {
    let result = run_connection(&stream, exports, stop, config);
    if config.verbose {
        match &result {
            Ok(()) | Err(Halt::Closed) | Err(Halt::Stopped) => eprintln!("nbd: connection {id} closed"),
            Err(e) => eprintln!("nbd: connection {id} dropped: {e}"),
        }
    }
    stream.shutdown();
}

fn run_connection(stream: &Stream, exports: &[Export], stop: &AtomicBool, config: &ServerConfig) -> Result<(), Halt> {
    stream.set_write_timeout(Some(config.write_timeout))?;
    stream.set_read_timeout(Some(config.poll_interval))?;
    let mut reader = stream.try_clone()?;
    let export = handshake(&mut reader, exports, stop, config)?;
    let writer = stream.try_clone()?;
    transmission(reader, writer, &exports[export], stop, config)
}

fn find_export(exports: &[Export], name: &str) -> Option<usize> {
    match exports.iter().position(|e| e.name == name) {
        Some(i) => Some(i),
        None if name.is_empty() && exports.len() == 1 => Some(0),
        None => None,
    }
}

fn send_option_reply(s: &mut Stream, reply: &OptionReply) -> Result<(), Halt> {
    s.write_all(&reply.encode())?;
    Ok(())
}

/// Fixed-newstyle option haggling. Returns the index of the export chosen with
/// NBD_OPT_GO or NBD_OPT_EXPORT_NAME.
fn handshake(s: &mut Stream, exports: &[Export], stop: &AtomicBool, config: &ServerConfig) -> Result<usize, Halt> {
    let deadline = Some(Instant::now() + config.handshake_timeout);
    let server_flags = handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES;
    s.write_all(&protocol::ServerGreeting { flags: server_flags }.encode())?;
    let mut flags = [0u8; protocol::CLIENT_FLAGS_LEN];
    read_full(s, &mut flags, stop, deadline)?;
    let no_zeroes = ClientFlags::decode(&flags).and_then(|f| f.negotiate(server_flags)).map_err(|e| Halt::Protocol(e.to_string()))?;

    for _ in 0..config.max_options {
        let mut hdr = [0u8; protocol::OPTION_HEADER_LEN];
        read_full(s, &mut hdr, stop, deadline)?;
        let header = OptionHeader::decode(&hdr).map_err(|e| Halt::Protocol(format!("option header: {e}")))?;
        let option = header.option;
        if header.length > MAX_OPTION_DATA {
            if option == opt::EXPORT_NAME {
                // This option cannot be answered with an error: the doc says terminate.
                return Err(Halt::Protocol("export name too long".into()));
            }
            drain(s, header.length as u64, stop, deadline)?;
            send_option_reply(s, &OptionReply::error(option, rep::ERR_TOO_BIG, "option data too large"))?;
            continue;
        }
        let mut data = vec![0u8; header.length as usize];
        read_full(s, &mut data, stop, deadline)?;
        let request = match OptionRequest::decode(option, &data) {
            Ok(r) => r,
            Err(e) if option == opt::EXPORT_NAME => return Err(Halt::Protocol(format!("NBD_OPT_EXPORT_NAME: {e}"))),
            Err(e) => {
                send_option_reply(s, &OptionReply::error(option, rep::ERR_INVALID, &e.to_string()))?;
                continue;
            }
        };
        match request {
            OptionRequest::ExportName(name) => {
                let Some(i) = find_export(exports, &name) else {
                    return Err(Halt::Protocol(format!("NBD_OPT_EXPORT_NAME: no export {name:?}")));
                };
                let e = &exports[i];
                let reply = ExportNameReply { size: e.array.size_bytes(), flags: protocol::transmission_flags(e.limits().read_only) };
                s.write_all(&reply.encode(no_zeroes))?;
                return Ok(i);
            }
            OptionRequest::Abort => {
                // The client may already have gone; the doc asks us to cope either way.
                let _ = send_option_reply(s, &OptionReply::ack(option));
                return Err(Halt::Closed);
            }
            OptionRequest::List => {
                for e in exports {
                    let entry = ServerEntry { name: e.name.clone(), details: protocol::sanitize_string(&e.description) };
                    send_option_reply(s, &OptionReply::server(option, &entry))?;
                }
                send_option_reply(s, &OptionReply::ack(option))?;
            }
            OptionRequest::Info(q) | OptionRequest::Go(q) => {
                let Some(i) = find_export(exports, &q.name) else {
                    let names: Vec<&str> = exports.iter().map(|e| e.name.as_str()).collect();
                    let msg = format!("no export named {:?} (exports: {})", q.name, names.join(", "));
                    send_option_reply(s, &OptionReply::error(option, rep::ERR_UNKNOWN, &msg))?;
                    continue;
                };
                for item in export_info(&exports[i], &q.name, &q.info_requests) {
                    send_option_reply(s, &OptionReply::info(option, &item))?;
                }
                send_option_reply(s, &OptionReply::ack(option))?;
                if option == opt::GO {
                    return Ok(i);
                }
            }
            OptionRequest::StructuredReply => {
                let msg = "structured replies are not implemented; this server sends simple replies";
                send_option_reply(s, &OptionReply::error(option, rep::ERR_UNSUP, msg))?;
            }
            OptionRequest::Other { option, .. } => {
                let msg = format!("option {option} is not supported");
                send_option_reply(s, &OptionReply::error(option, rep::ERR_UNSUP, &msg))?;
            }
        }
    }
    Err(Halt::Protocol("too many options".into()))
}

/// The NBD_REP_INFO items for an export: always the size and flags, and the block sizes
/// (ours are the protocol defaults, so sending them unasked is harmless and informative);
/// the name when asked or when the client used the default name; the description when asked.
fn export_info(e: &Export, asked_name: &str, requests: &[u16]) -> Vec<Info> {
    let mut out = vec![Info::Export { size: e.array.size_bytes(), flags: protocol::transmission_flags(e.limits().read_only) }];
    if requests.contains(&info::NAME) || asked_name != e.name {
        out.push(Info::Name(e.name.clone()));
    }
    if requests.contains(&info::DESCRIPTION) && !e.description.is_empty() {
        out.push(Info::Description(protocol::sanitize_string(&e.description)));
    }
    out.push(Info::BlockSize {
        minimum: protocol::MIN_BLOCK_SIZE,
        preferred: protocol::PREFERRED_BLOCK_SIZE,
        maximum: protocol::MAX_PAYLOAD,
    });
    out
}

// ------------------------------------------------------------------ transmission phase

/// The write half of the socket. Replies are written whole under this lock so they never
/// interleave; after a failed write the socket is shut down so the reader stops too.
struct ReplyWriter {
    stream: Stream,
    broken: bool,
}

/// Bytes of payload the connection's in-flight requests hold.
struct Budget {
    used: Mutex<u64>,
    freed: Condvar,
    max: u64,
}

impl Budget {
    fn lock(&self) -> MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Waits until `n` more bytes fit (a lone request always fits, so one larger than
    /// `max` cannot wedge the connection). False if the server is stopping.
    fn acquire(&self, n: u64, stop: &AtomicBool, poll: Duration) -> bool {
        let mut used = self.lock();
        while *used > 0 && used.saturating_add(n) > self.max {
            if stop.load(Ordering::Acquire) {
                return false;
            }
            used = self.freed.wait_timeout(used, poll).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
        *used += n;
        true
    }
    fn release(&self, n: u64) {
        let mut used = self.lock();
        *used = used.saturating_sub(n);
        self.freed.notify_all();
    }
}

struct Conn {
    array: Arc<dyn Volume>,
    writer: Mutex<ReplyWriter>,
    budget: Budget,
}

impl Conn {
    /// Sends one reply; false once the connection is broken.
    fn send(&self, bytes: &[u8]) -> bool {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if w.broken {
            return false;
        }
        if w.stream.write_all(bytes).is_err() {
            w.broken = true;
            // Wakes the reader (its next read sees EOF) so the connection winds down.
            w.stream.shutdown();
            return false;
        }
        true
    }
    fn send_error(&self, cookie: u64, error: u32) -> bool {
        self.send(&SimpleReply { error, cookie }.encode())
    }
}

/// Alignment of request data buffers: a page, the largest direct-I/O alignment in common use.
const DATA_ALIGN: usize = 4096;

/// One request handed to the workers.
struct Job {
    cookie: u64,
    op: Validated,
    /// WRITE data (page-aligned, so members with direct I/O write it as it is); `None`
    /// otherwise (no allocation for reads, flushes, trims).
    data: Option<AlignedBuf>,
    /// Bytes taken from the budget, given back when the reply is out.
    budget: u64,
}

fn transmission(mut reader: Stream, writer: Stream, export: &Export, stop: &AtomicBool, config: &ServerConfig) -> Result<(), Halt> {
    let limits = export.limits();
    let conn = Arc::new(Conn {
        array: export.array.clone(),
        writer: Mutex::new(ReplyWriter { stream: writer, broken: false }),
        budget: Budget { used: Mutex::new(0), freed: Condvar::new(), max: config.inflight_bytes_max.max(protocol::MAX_PAYLOAD as u64) },
    });
    let (tx, rx) = sync_channel::<Job>(QUEUE_DEPTH);
    let rx = Arc::new(Mutex::new(rx));
    let mut workers = Vec::new();
    for w in 0..config.workers_per_connection.max(1) {
        let conn = conn.clone();
        let rx = rx.clone();
        let name = format!("{}-w{w}", std::thread::current().name().unwrap_or("nbd"));
        match std::thread::Builder::new().name(name).spawn(move || worker(&conn, &rx)) {
            Ok(h) => workers.push(h),
            // Fewer workers only means less parallelism; none at all is handled below.
            Err(e) => eprintln!("nbd: cannot start a worker: {e}"),
        }
    }
    if workers.is_empty() {
        return Err(Halt::Io(io::Error::other("no worker threads")));
    }

    let result = read_requests(&mut reader, &conn, &limits, stop, config, &tx);
    // "MUST handle all outstanding requests" before closing: let the workers drain the
    // queue, then close the socket.
    drop(tx);
    for h in workers {
        let _ = h.join();
    }
    result
}

fn read_requests(
    reader: &mut Stream,
    conn: &Conn,
    limits: &ExportLimits,
    stop: &AtomicBool,
    config: &ServerConfig,
    tx: &std::sync::mpsc::SyncSender<Job>,
) -> Result<(), Halt> {
    loop {
        let mut hdr = [0u8; protocol::REQUEST_LEN];
        read_full(reader, &mut hdr, stop, None)?;
        let req = RequestHeader::decode(&hdr).map_err(|e| Halt::Protocol(format!("request: {e}")))?;
        let op = match protocol::validate_request(&req, limits) {
            Ok(Validated::Disconnect) => return Ok(()),
            Ok(op) => op,
            Err(error) => {
                // A refused WRITE still carries its data; skip it to stay in step.
                drain(reader, req.payload_len() as u64, stop, None)?;
                if !conn.send_error(req.cookie, error) {
                    return Err(Halt::Closed);
                }
                continue;
            }
        };
        let budget = match op {
            Validated::Read { length, .. } | Validated::Write { length, .. } => length as u64,
            _ => 0,
        };
        if !conn.budget.acquire(budget, stop, config.poll_interval) {
            return Err(Halt::Stopped);
        }
        let mut data = None;
        if let Validated::Write { length, .. } = op {
            // Bounded by validate_request (≤ MAX_PAYLOAD) and by the budget just taken.
            let buf = data.insert(AlignedBuf::zeroed(length as usize, DATA_ALIGN));
            read_full(reader, buf, stop, None)?;
        }
        if tx.send(Job { cookie: req.cookie, op, data, budget }).is_err() {
            return Err(Halt::Closed);
        }
    }
}

fn worker(conn: &Conn, rx: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never while working.
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(j) => j,
            Err(_) => return,
        };
        let (cookie, budget) = (job.cookie, job.budget);
        // An engine bug must not leave the client waiting forever for this cookie.
        if catch_unwind(AssertUnwindSafe(|| execute(conn, job))).is_err() {
            conn.send_error(cookie, errno::EIO);
        }
        conn.budget.release(budget);
    }
}

fn execute(conn: &Conn, job: Job) {
    let array = &conn.array;
    let flush_if = |fua: bool| if fua { array.flush() } else { Ok(()) };
    let result = match job.op {
        Validated::Read { offset, length } => {
            // Header and data in one buffer so the reply is one write under the lock; the
            // data starts on a page boundary (the header just before it), so members with
            // direct I/O read into it as it is.
            let mut buf = AlignedBuf::zeroed(DATA_ALIGN + length as usize, DATA_ALIGN);
            let header_at = DATA_ALIGN - protocol::SIMPLE_REPLY_LEN;
            match array.read(offset, &mut buf[DATA_ALIGN..]) {
                Ok(()) => {
                    buf[header_at..DATA_ALIGN].copy_from_slice(&SimpleReply { error: 0, cookie: job.cookie }.encode());
                    conn.send(&buf[header_at..]);
                    return;
                }
                Err(e) => Err(e),
            }
        }
        Validated::Write { offset, fua, .. } => array.write(offset, job.data.as_deref().unwrap_or_default()).and_then(|()| flush_if(fua)),
        Validated::Flush => array.flush(),
        Validated::Zero { offset, length, fua, may_discard } => {
            let zeroed = if may_discard { array.discard(offset, length as u64) } else { array.write_zeroes(offset, length as u64) };
            zeroed.and_then(|()| flush_if(fua))
        }
        Validated::Disconnect => return,
    };
    drop(job.data);
    let writes = matches!(job.op, Validated::Write { .. } | Validated::Zero { .. });
    let error = match result {
        Ok(()) => 0,
        Err(e) => engine_errno(&e, writes),
    };
    conn.send_error(job.cookie, error);
}

/// Maps engine errors onto the few values NBD allows, by kind (never by message). The
/// match is exhaustive so that a new kind of error needs a decision here. `writes`: the
/// request writes (a range past the end is then ENOSPC, as the NBD spec asks, else EINVAL).
fn engine_errno(e: &EngineError, writes: bool) -> u32 {
    match e {
        EngineError::OutOfRange { .. } if writes => errno::ENOSPC,
        EngineError::OutOfRange { .. } | EngineError::Invalid(_) => errno::EINVAL,
        EngineError::ReadOnly => errno::EPERM,
        EngineError::Unsupported(_) => errno::ENOTSUP,
        // Lost data, a failed array or member, a stripe that cannot be rebuilt: what the
        // kernel reports for a failed block I/O.
        EngineError::Unreadable { .. } | EngineError::Failed(_) | EngineError::Plan(_) => errno::EIO,
        // Assembly errors: not produced by a request on an open array.
        EngineError::NoSuperblock { .. } | EngineError::Refused(_) | EngineError::ReshapeInProgress { .. } => errno::EIO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uraid_engine::Fault;

    #[test]
    fn engine_errors_map_to_nbd_errors_by_kind() {
        let past_end = EngineError::OutOfRange { offset: 1 << 20, len: 512, size: 1 << 20 };
        assert_eq!(engine_errno(&past_end, true), errno::ENOSPC, "a write past the end is a full disk");
        assert_eq!(engine_errno(&past_end, false), errno::EINVAL);
        assert_eq!(engine_errno(&EngineError::ReadOnly, true), errno::EPERM);
        assert_eq!(engine_errno(&EngineError::Invalid("x".into()), false), errno::EINVAL);
        assert_eq!(engine_errno(&EngineError::Unsupported("x".into()), false), errno::ENOTSUP);
        let failed = EngineError::Failed(Fault::MembersKeptFailing { stripe: 3 });
        assert_eq!(engine_errno(&failed, true), errno::EIO);
        assert_eq!(engine_errno(&EngineError::Unreadable { offset: 0, detail: String::new() }, false), errno::EIO);
    }
}
