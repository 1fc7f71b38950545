//! Shared test helpers: an array built in memory with the real create planner, a server
//! running on a thread, and a small raw-protocol client.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::create::ArraySketch;
use uraid_engine::Array;
use uraid_nbd::protocol::*;
use uraid_nbd::{Export, Listener, NbdServer, ServerConfig};

/// A RAID level over `disks` in-memory members of `member_bytes` each, named `name`.
pub fn array(level: Level, disks: usize, member_bytes: usize, name: &str) -> Arc<Array> {
    let members = uraid_engine::create::as_members(&uraid_engine::create::mem_devices(disks, member_bytes, "m"));
    Arc::new(ArraySketch::new(level, name).create(&members, &[]).expect("create"))
}

pub fn raid5(name: &str) -> Arc<Array> {
    array(Level::Raid5, 4, 4 << 20, name)
}

/// How long a test waits for something that must happen (a reply, a close, a stop) before
/// calling it hung: far beyond any machine's slowness, so it never decides a verdict by speed.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A server on its own thread; stopped and joined on drop.
pub struct Running {
    pub addr: String,
    pub uris: Vec<String>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    pub fn start(addr: &str, exports: Vec<Export>) -> Running {
        // A handshake deadline far beyond the hang guard, so no client, however slow the
        // machine, races it (the deadline has its own test, with its own short one).
        let config =
            ServerConfig { handshake_timeout: Duration::from_secs(3600), poll_interval: Duration::from_millis(20), ..Default::default() };
        Running::start_with(addr, exports, config)
    }
    pub fn start_with(addr: &str, exports: Vec<Export>, config: ServerConfig) -> Running {
        let listener: Listener = uraid_nbd::bind(addr).expect("bind");
        let uris = exports.iter().map(|e| listener.uri(&e.name)).collect();
        let addr = listener.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let server = NbdServer::new(listener, exports, stop.clone()).with_config(config);
        let thread = Some(std::thread::spawn(move || server.run()));
        Running { addr, uris, stop, thread }
    }
    /// Sets `stop` and waits for the server thread to return; panics if it has not after
    /// [`HANG_GUARD`] (a stop that waits for clients to leave hangs, it is never just slow).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.thread.take() {
            let start = Instant::now();
            while !h.is_finished() {
                assert!(start.elapsed() < HANG_GUARD, "the server did not stop within {HANG_GUARD:?}: hung");
                std::thread::sleep(Duration::from_millis(5));
            }
            h.join().expect("server thread").expect("server result");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failing test: tell the server to stop, but do not wait (or panic) again.
            self.stop.store(true, Ordering::Release);
        } else if self.thread.is_some() {
            self.stop();
        }
    }
}

/// A raw NBD client over either transport.
pub enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Read for Sock {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(b),
            Sock::Unix(s) => s.read(b),
        }
    }
}
impl Write for Sock {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(b),
            Sock::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Sock {
    pub fn connect(addr: &str) -> Sock {
        let s = match addr.strip_prefix("unix:") {
            Some(p) => Sock::Unix(UnixStream::connect(p).expect("connect unix")),
            None => Sock::Tcp(TcpStream::connect(addr).expect("connect tcp")),
        };
        // Only a hang guard: every read waits for its event, at most this long.
        s.set_timeout(HANG_GUARD);
        s
    }
    pub fn set_timeout(&self, t: Duration) {
        match self {
            Sock::Tcp(s) => s.set_read_timeout(Some(t)).expect("timeout"),
            Sock::Unix(s) => s.set_read_timeout(Some(t)).expect("timeout"),
        }
    }
    pub fn try_clone(&self) -> Sock {
        match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone().expect("clone")),
            Sock::Unix(s) => Sock::Unix(s.try_clone().expect("clone")),
        }
    }
    pub fn read_n(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.read_exact(&mut b).expect("read");
        b
    }
    /// True if the server closed the connection (EOF or reset) within the read time-out
    /// ([`HANG_GUARD`] unless set otherwise).
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.read(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }

    /// Reads the greeting and sends client flags (fixed newstyle, no zeroes).
    pub fn greet(&mut self) -> ServerGreeting {
        let g = ServerGreeting::decode(&self.read_n(GREETING_LEN)).expect("greeting");
        assert_eq!(g.flags, handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES);
        self.write_all(&ClientFlags(client_flags::FIXED_NEWSTYLE | client_flags::NO_ZEROES).encode()).expect("flags");
        g
    }
    pub fn option(&mut self, req: &OptionRequest) {
        self.write_all(&req.encode()).expect("send option");
    }
    pub fn option_reply(&mut self) -> OptionReply {
        let mut bytes = self.read_n(OPTION_REPLY_HEADER_LEN);
        let len = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes")) as usize;
        bytes.extend(self.read_n(len));
        OptionReply::decode(&bytes).expect("option reply").0
    }
    /// Sends NBD_OPT_GO and collects the infos; panics unless it ends with ACK.
    pub fn go(&mut self, name: &str) -> Vec<Info> {
        let q = ExportQuery { name: name.into(), info_requests: vec![info::NAME, info::DESCRIPTION, info::BLOCK_SIZE] };
        self.option(&OptionRequest::Go(q));
        let mut infos = Vec::new();
        loop {
            let r = self.option_reply();
            assert_eq!(r.option, opt::GO);
            match r.reply_type {
                rep::INFO => infos.push(Info::decode(&r.data).expect("info")),
                rep::ACK => return infos,
                other => panic!("GO {name:?} refused: {other:#x} {}", String::from_utf8_lossy(&r.data)),
            }
        }
    }
    /// Connects, greets and enters transmission on `name`; returns (size, flags).
    pub fn open(addr: &str, name: &str) -> (Sock, u64, u16) {
        let mut s = Sock::connect(addr);
        s.greet();
        let infos = s.go(name);
        let (size, flags) = infos
            .iter()
            .find_map(|i| match i {
                Info::Export { size, flags } => Some((*size, *flags)),
                _ => None,
            })
            .expect("NBD_INFO_EXPORT");
        (s, size, flags)
    }

    pub fn request(&mut self, command: u16, flags: u16, cookie: u64, offset: u64, length: u32, data: &[u8]) {
        let mut b = RequestHeader { flags, command, cookie, offset, length }.encode().to_vec();
        b.extend_from_slice(data);
        self.write_all(&b).expect("send request");
    }
    pub fn reply(&mut self) -> SimpleReply {
        SimpleReply::decode(&self.read_n(SIMPLE_REPLY_LEN)).expect("simple reply")
    }
    /// One request, one reply (synchronous use only).
    pub fn call(&mut self, command: u16, flags: u16, offset: u64, length: u32, data: &[u8]) -> u32 {
        self.request(command, flags, 7, offset, length, data);
        let r = self.reply();
        assert_eq!(r.cookie, 7);
        r.error
    }
    pub fn read_at(&mut self, offset: u64, length: u32) -> Result<Vec<u8>, u32> {
        self.request(cmd::READ, 0, 8, offset, length, &[]);
        let r = self.reply();
        assert_eq!(r.cookie, 8);
        if r.error != 0 {
            return Err(r.error);
        }
        Ok(self.read_n(length as usize))
    }
    pub fn write_at(&mut self, offset: u64, data: &[u8], fua: bool) -> u32 {
        self.call(cmd::WRITE, if fua { cmd_flags::FUA } else { 0 }, offset, data.len() as u32, data)
    }
}

/// Seeded test data: the parity crate's generator, shared by every test suite.
pub use uraid_parity::testdata::Prng as Rng;

/// Creates an array of `level` over `members` with md's defaults and the real planner.
pub fn create_on(level: Level, members: &[Arc<dyn uraid_engine::Member>]) {
    ArraySketch::new(level, "nbd").write(members, &[]).expect("write the superblocks");
}
