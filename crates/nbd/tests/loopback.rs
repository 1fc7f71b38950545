//! The server against a raw-protocol client over TCP loopback and unix sockets, with
//! arrays built in memory.

mod common;

use common::{raid5, Rng, Running, Sock, HANG_GUARD};
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_nbd::protocol::*;
use uraid_nbd::{Export, ServerConfig};

fn export(name: &str) -> Export {
    Export::new(raid5(name))
}

fn unix_addr(dir: &tempfile::TempDir) -> String {
    format!("unix:{}", dir.path().join("nbd.sock").display())
}

#[test]
fn handshake_options() {
    let server = Running::start("127.0.0.1:0", vec![export("alpha"), export("beta")]);
    let mut s = Sock::connect(&server.addr);
    s.greet();

    s.option(&OptionRequest::List);
    let mut names = Vec::new();
    loop {
        let r = s.option_reply();
        assert_eq!(r.option, opt::LIST);
        if r.reply_type == rep::ACK {
            break;
        }
        assert_eq!(r.reply_type, rep::SERVER);
        let e = ServerEntry::decode(&r.data).expect("server entry");
        assert!(e.details.contains("raid5"), "{e:?}");
        names.push(e.name);
    }
    assert_eq!(names, ["alpha", "beta"]);

    // Two exports: the default name matches neither.
    s.option(&OptionRequest::Info(ExportQuery { name: String::new(), info_requests: vec![] }));
    let r = s.option_reply();
    assert_eq!(r.reply_type, rep::ERR_UNKNOWN, "{}", String::from_utf8_lossy(&r.data));

    s.option(&OptionRequest::StructuredReply);
    assert_eq!(s.option_reply().reply_type, rep::ERR_UNSUP);
    s.option(&OptionRequest::Other { option: 9999, data: b"whatever".to_vec() });
    let r = s.option_reply();
    assert_eq!((r.option, r.reply_type), (9999, rep::ERR_UNSUP));
    s.option(&OptionRequest::Other { option: opt::STARTTLS, data: vec![] });
    assert_eq!(s.option_reply().reply_type, rep::ERR_UNSUP);

    // Malformed GO data (name length beyond the data) is answered, not fatal.
    let mut bad = OptionHeader { option: opt::GO, length: 6 }.encode().to_vec();
    bad.extend_from_slice(&[0, 0, 0, 9, 0, 0]);
    s.write_all(&bad).expect("send");
    assert_eq!(s.option_reply().reply_type, rep::ERR_INVALID);

    // Option data over the server's limit is skipped and refused.
    let mut big = OptionHeader { option: 4242, length: 1 << 20 }.encode().to_vec();
    big.resize(big.len() + (1 << 20), 0xAA);
    s.write_all(&big).expect("send");
    assert_eq!(s.option_reply().reply_type, rep::ERR_TOO_BIG);

    s.option(&OptionRequest::Info(ExportQuery { name: "beta".into(), info_requests: vec![info::DESCRIPTION] }));
    let mut infos = Vec::new();
    loop {
        let r = s.option_reply();
        if r.reply_type == rep::ACK {
            break;
        }
        assert_eq!(r.reply_type, rep::INFO);
        infos.push(Info::decode(&r.data).expect("info"));
    }
    let size = server_size(&infos);
    assert!(size > 0 && size.is_multiple_of(512));
    assert!(infos.iter().any(|i| matches!(i, Info::Description(d) if d.contains("beta"))));
    assert!(infos.contains(&Info::BlockSize { minimum: 1, preferred: 4096, maximum: 32 << 20 }));

    let infos = s.go("alpha");
    let flags = infos.iter().find_map(|i| if let Info::Export { flags, .. } = i { Some(*flags) } else { None }).expect("export info");
    assert_eq!(flags, transmission_flags(false));
    assert!(infos.contains(&Info::Name("alpha".into())));
    assert_eq!(s.read_at(0, 512).expect("read").len(), 512);
    s.request(cmd::DISC, 0, 1, 0, 0, &[]);
    assert!(s.is_closed());
}

fn server_size(infos: &[Info]) -> u64 {
    infos.iter().find_map(|i| if let Info::Export { size, .. } = i { Some(*size) } else { None }).expect("export info")
}

#[test]
fn default_export_and_export_name_with_zeroes() {
    let a = raid5("only");
    let size = a.size_bytes();
    let server = Running::start("127.0.0.1:0", vec![Export::new(a)]);
    // Old-style client: no NO_ZEROES, so the 124 zero bytes follow.
    let mut s = Sock::connect(&server.addr);
    ServerGreeting::decode(&s.read_n(GREETING_LEN)).expect("greeting");
    s.write_all(&ClientFlags(client_flags::FIXED_NEWSTYLE).encode()).expect("flags");
    s.option(&OptionRequest::ExportName(String::new()));
    let reply = s.read_n(EXPORT_NAME_REPLY_LEN);
    let r = ExportNameReply::decode(&reply).expect("reply");
    assert_eq!(r.size, size);
    assert_eq!(r.flags, transmission_flags(false));
    assert!(reply[10..].iter().all(|b| *b == 0));
    assert_eq!(s.write_at(4096, b"hello", false), 0);
    assert_eq!(s.read_at(4096, 5).expect("read"), b"hello");

    // An unknown name on EXPORT_NAME cannot be refused politely: the server hangs up.
    let mut s = Sock::connect(&server.addr);
    s.greet();
    s.option(&OptionRequest::ExportName("nope".into()));
    assert!(s.is_closed());

    // ABORT gets its ACK, then the server closes.
    let mut s = Sock::connect(&server.addr);
    s.greet();
    s.option(&OptionRequest::Abort);
    assert_eq!(s.option_reply().reply_type, rep::ACK);
    assert!(s.is_closed());
}

fn random_io(addr: &str, name: &str, seed: u64) {
    let (mut s, size, _) = Sock::open(addr, name);
    let mut model = vec![0u8; size as usize];
    let mut rng = Rng::new(seed);
    for i in 0..300 {
        let len = match rng.below(4) {
            0 => 1 + rng.below(700),
            1 => 512 * (1 + rng.below(16)),
            2 => 4096 * (1 + rng.below(64)),
            _ => 1 + rng.below(600_000),
        }
        .min(size);
        let off = rng.below(size - len + 1);
        match rng.below(10) {
            0..=5 => {
                let data = rng.bytes(len as usize);
                assert_eq!(s.write_at(off, &data, rng.below(4) == 0), 0, "write {len}@{off}");
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
            }
            6 => {
                let command = if rng.below(2) == 0 { cmd::TRIM } else { cmd::WRITE_ZEROES };
                let flags = if command == cmd::WRITE_ZEROES { cmd_flags::NO_HOLE } else { 0 };
                assert_eq!(s.call(command, flags, off, len as u32, &[]), 0);
                model[off as usize..(off + len) as usize].fill(0);
            }
            7 => assert_eq!(s.call(cmd::FLUSH, 0, 0, 0, &[]), 0),
            _ => {
                let got = s.read_at(off, len as u32).expect("read");
                assert!(got == model[off as usize..(off + len) as usize], "op {i}: read {len}@{off} differs");
            }
        }
    }
    // The whole export matches the model.
    let mut off = 0;
    while off < size {
        let n = (size - off).min(4 << 20);
        let got = s.read_at(off, n as u32).expect("read");
        assert!(got == model[off as usize..(off + n) as usize], "final read at {off}");
        off += n;
    }
    s.request(cmd::DISC, 0, 0, 0, 0, &[]);
}

#[test]
fn random_io_over_tcp() {
    let server = Running::start("127.0.0.1:0", vec![export("tcp")]);
    random_io(&server.addr, "tcp", 0x1234_5678);
}

#[test]
fn random_io_over_unix_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let addr = unix_addr(&dir);
    let mut server = Running::start(&addr, vec![Export::new(common::array(Level::Raid6, 5, 4 << 20, "six"))]);
    random_io(&server.addr, "", 0x9abc_def1);
    server.stop();
    assert!(!dir.path().join("nbd.sock").exists(), "socket file removed at stop");
}

#[test]
fn trim_and_write_zeroes_read_back_zeros() {
    let server = Running::start("127.0.0.1:0", vec![export("z")]);
    let (mut s, size, _) = Sock::open(&server.addr, "z");
    let ones = vec![0xFFu8; 1 << 20];
    assert_eq!(s.write_at(0, &ones, false), 0);
    assert_eq!(s.call(cmd::TRIM, 0, 4096, 8192, &[]), 0);
    assert_eq!(s.call(cmd::WRITE_ZEROES, cmd_flags::NO_HOLE | cmd_flags::FUA, 100_001, 3333, &[]), 0);
    let got = s.read_at(0, 1 << 20).expect("read");
    for (i, b) in got.iter().enumerate() {
        let zero = (4096..12288).contains(&i) || (100_001..103_334).contains(&i);
        assert_eq!(*b, if zero { 0 } else { 0xFF }, "byte {i}");
    }
    // Payload-less zeroing may exceed the payload limit; it is honoured.
    assert_eq!(s.call(cmd::WRITE_ZEROES, 0, 0, size as u32, &[]), 0);
    assert!(s.read_at(0, 1 << 20).expect("read").iter().all(|b| *b == 0));
}

#[test]
fn bad_requests_get_errors_and_the_connection_stays_usable() {
    let server = Running::start("127.0.0.1:0", vec![export("e")]);
    let (mut s, size, _) = Sock::open(&server.addr, "e");
    assert_eq!(s.read_at(size, 1), Err(errno::EINVAL));
    assert_eq!(s.read_at(u64::MAX - 10, 512), Err(errno::EINVAL));
    assert_eq!(s.write_at(size - 100, &[1u8; 512], false), errno::ENOSPC);
    assert_eq!(s.call(cmd::TRIM, 0, size - 1, 2, &[]), errno::EINVAL);
    assert_eq!(s.call(cmd::WRITE_ZEROES, 0, size, 1, &[]), errno::ENOSPC);
    assert_eq!(s.read_at(0, (32 << 20) + 1), Err(errno::EINVAL));
    assert_eq!(s.call(77, 0, 0, 0, &[]), errno::EINVAL, "unknown command");
    assert_eq!(s.call(cmd::READ, cmd_flags::NO_HOLE, 0, 512, &[]), errno::EINVAL, "flag not for READ");
    assert_eq!(s.call(cmd::WRITE_ZEROES, cmd_flags::FAST_ZERO, 0, 512, &[]), errno::EINVAL, "not advertised");
    assert_eq!(s.call(cmd::BLOCK_STATUS, 0, 0, 512, &[]), errno::EINVAL);
    assert_eq!(s.call(cmd::FLUSH, 0, 1, 1, &[]), errno::EINVAL);
    // A write over the payload limit: its data is skipped, the error returned.
    let big = vec![0x5Au8; (32 << 20) + 4096];
    assert_eq!(s.write_at(0, &big, false), errno::EINVAL);
    // Still in step and nothing was written by the refused requests.
    assert!(s.read_at(0, 8192).expect("read").iter().all(|b| *b == 0));
    assert!(s.read_at(size - 4096, 4096).expect("read").iter().all(|b| *b == 0));
    assert_eq!(s.write_at(size - 3, b"end", true), 0);
    assert_eq!(s.read_at(size - 3, 3).expect("read"), b"end");
    // Zero-length requests are harmless.
    assert_eq!(s.read_at(0, 0).expect("read"), b"");
    assert_eq!(s.write_at(size, b"", false), 0);
}

#[test]
fn read_only_export_refuses_writes() {
    let mut e = export("ro");
    e.read_only = true;
    let server = Running::start("127.0.0.1:0", vec![e]);
    let (mut s, _, flags) = Sock::open(&server.addr, "ro");
    assert_eq!(flags, transmission_flags(true));
    assert_eq!(s.write_at(0, b"nope", false), errno::EPERM);
    assert_eq!(s.call(cmd::TRIM, 0, 0, 512, &[]), errno::EPERM);
    assert_eq!(s.call(cmd::WRITE_ZEROES, 0, 0, 512, &[]), errno::EPERM);
    assert_eq!(s.call(cmd::FLUSH, 0, 0, 0, &[]), 0);
    assert!(s.read_at(0, 4).expect("read").iter().all(|b| *b == 0));
}

#[test]
fn malformed_clients_are_disconnected_and_the_server_survives() {
    // A handshake deadline far beyond the hang guard: every close below is the server's answer
    // to the violation (never the deadline), and no well-behaved client is too slow for it.
    let config =
        ServerConfig { handshake_timeout: Duration::from_secs(3600), poll_interval: Duration::from_millis(20), ..Default::default() };
    let server = Running::start_with("127.0.0.1:0", vec![export("m")], config);

    // Bad request magic in transmission.
    let (mut s, _, _) = Sock::open(&server.addr, "m");
    let mut hdr = RequestHeader { flags: 0, command: cmd::READ, cookie: 1, offset: 0, length: 512 }.encode();
    hdr[0] ^= 0xFF;
    s.write_all(&hdr).expect("send");
    assert!(s.is_closed());

    // Bad option magic in the handshake.
    let mut s = Sock::connect(&server.addr);
    s.greet();
    s.write_all(b"IHAVEOPX\0\0\0\x01\0\0\0\0").expect("send");
    assert!(s.is_closed());

    // Unknown client flags.
    let mut s = Sock::connect(&server.addr);
    s.read_n(GREETING_LEN);
    s.write_all(&ClientFlags(0x8000_0001).encode()).expect("send");
    assert!(s.is_closed());

    // Garbage of every sort, then a well-behaved client still works.
    let mut rng = Rng::new(77);
    for _ in 0..20 {
        let mut s = Sock::connect(&server.addr);
        let n = rng.below(300) as usize;
        let _ = s.write_all(&rng.bytes(n));
        drop(s);
    }
    let (mut s, _, _) = Sock::open(&server.addr, "m");
    assert_eq!(s.write_at(0, b"alive", false), 0);
    assert_eq!(s.read_at(0, 5).expect("read"), b"alive");

    // A client that says nothing is dropped at the handshake deadline (a short one, on a
    // server of its own): closed at all (not left open until our read time-out, the hang
    // guard), and not before the deadline (which runs from the accept, after our connect),
    // so it was the deadline that dropped it.
    let config =
        ServerConfig { handshake_timeout: Duration::from_millis(500), poll_interval: Duration::from_millis(20), ..Default::default() };
    let quick = Running::start_with("127.0.0.1:0", vec![export("q")], config);
    let t = Instant::now();
    let mut s = Sock::connect(&quick.addr);
    s.read_n(GREETING_LEN);
    assert!(s.is_closed(), "a silent client was still connected after {HANG_GUARD:?}");
    assert!(t.elapsed() >= Duration::from_millis(500), "dropped after {:?}, before the 500 ms handshake deadline", t.elapsed());
    // The server goes on accepting and greeting clients (reading the greeting needs no
    // race against the deadline).
    Sock::connect(&quick.addr).read_n(GREETING_LEN);
}

/// Many requests in flight on one connection; replies come back in completion order and
/// are matched by cookie.
#[test]
fn pipelined_requests_on_one_connection() {
    let server = Running::start("127.0.0.1:0", vec![export("p")]);
    let (s, size, _) = Sock::open(&server.addr, "p");
    let mut rng = Rng::new(4242);
    // Disjoint regions so concurrent writes have one right answer.
    let region = 64 * 1024u64;
    let regions = (size / region).min(48);
    let mut model: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut tx = s.try_clone();
    let mut rx = s;

    // Phase 1: all writes at once (mixed sizes within each region, some FUA).
    let mut sent = Vec::new();
    for r in 0..regions {
        let len = 1 + rng.below(region);
        let data = rng.bytes(len as usize);
        let cookie = 1000 + r;
        let flags = if r % 5 == 0 { cmd_flags::FUA } else { 0 };
        sent.push((cookie, r * region, data.clone(), flags));
        model.insert(r, data);
    }
    let writer = std::thread::spawn(move || {
        for (cookie, off, data, flags) in sent {
            tx.request(cmd::WRITE, flags, cookie, off, data.len() as u32, &data);
        }
        tx.request(cmd::FLUSH, 0, 1, 0, 0, &[]);
        tx
    });
    let mut seen = std::collections::HashSet::new();
    for _ in 0..regions + 1 {
        let r = rx.reply();
        assert_eq!(r.error, 0);
        assert!(seen.insert(r.cookie), "cookie {} answered twice", r.cookie);
    }
    let mut tx = writer.join().expect("writer");
    assert_eq!(seen.len() as u64, regions + 1);

    // Phase 2: reads of different sizes at once: big ones first so small ones overtake.
    let mut expect: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut order = Vec::new();
    for r in 0..regions {
        let len = model[&r].len() as u64;
        let cookie = (r << 32) | 0xABCD;
        expect.insert(cookie, model[&r].clone());
        order.push((cookie, r * region, len));
    }
    order.sort_by_key(|(_, _, len)| std::cmp::Reverse(*len));
    let lens: HashMap<u64, u64> = order.iter().map(|(c, _, l)| (*c, *l)).collect();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        for _ in 0..lens.len() {
            let r = rx.reply();
            assert_eq!(r.error, 0);
            let len = *lens.get(&r.cookie).unwrap_or_else(|| panic!("unknown cookie {}", r.cookie));
            got.push((r.cookie, rx.read_n(len as usize)));
        }
        got
    });
    for (cookie, off, len) in &order {
        tx.request(cmd::READ, 0, *cookie, *off, *len as u32, &[]);
    }
    let got = reader.join().expect("reader");
    let sent_order: Vec<u64> = order.iter().map(|(c, _, _)| *c).collect();
    let got_order: Vec<u64> = got.iter().map(|(c, _)| *c).collect();
    for (cookie, data) in got {
        assert!(expect.remove(&cookie).expect("cookie once") == data, "data for cookie {cookie:#x}");
    }
    assert!(expect.is_empty());
    println!("replies out of order: {}", sent_order != got_order);
}

/// NBD_FLAG_CAN_MULTI_CONN: a flush on one connection covers writes acknowledged on another.
#[test]
fn writes_on_one_connection_visible_and_flushed_from_another() {
    let server = Running::start("127.0.0.1:0", vec![export("mc")]);
    let (mut a, _, flags) = Sock::open(&server.addr, "mc");
    assert!(flags & transmission_flags::CAN_MULTI_CONN != 0);
    let (mut b, _, _) = Sock::open(&server.addr, "mc");
    assert_eq!(a.write_at(8192, b"from a", false), 0);
    assert_eq!(b.call(cmd::FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(b.read_at(8192, 6).expect("read"), b"from a");
}

/// Stop does not wait for connected clients: neither for an idle one to disconnect nor for
/// a half-open one's handshake deadline. Both would be forever here (the deadline is an
/// hour, the clients stay until the end), so waiting for either is a hang that `stop`'s
/// hang guard reports, whatever the machine's speed.
#[test]
fn stop_is_prompt_with_clients_connected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config =
        ServerConfig { handshake_timeout: Duration::from_secs(3600), poll_interval: Duration::from_millis(20), ..Default::default() };
    let mut server = Running::start_with(&unix_addr(&dir), vec![export("s")], config);
    let (mut idle, _, _) = Sock::open(&server.addr, "s");
    let mut half = Sock::connect(&server.addr);
    half.greet(); // stuck in the handshake
    assert_eq!(idle.write_at(0, b"x", false), 0);
    server.stop();
    assert!(idle.is_closed());
    assert!(half.is_closed());
}

#[test]
fn bind_parses_addresses() {
    assert!(uraid_nbd::bind("127.0.0.1:0").is_ok());
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let l = uraid_nbd::bind("[::1]:0").expect("ipv6");
        assert!(l.local_addr().starts_with("[::1]:"), "{}", l.local_addr());
    }
    assert!(uraid_nbd::bind("unix:").is_err());
    assert!(uraid_nbd::bind("not an address").is_err());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s");
    let addr = format!("unix:{}", path.display());
    let l = uraid_nbd::bind(&addr).expect("unix");
    assert_eq!(l.local_addr(), addr);
    assert!(uraid_nbd::bind(&addr).is_err(), "live socket not replaced");
    assert!(l.uri("x").starts_with("nbd+unix:///x?socket="));
    drop(l);
    assert!(!path.exists(), "socket file removed with the listener");
    // A stale socket file (its server died without cleaning up) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).expect("std bind"));
    assert!(path.exists());
    assert!(uraid_nbd::bind(&addr).is_ok());
    // A regular file is never removed.
    std::fs::write(dir.path().join("f"), b"data").expect("write");
    assert!(uraid_nbd::bind(&format!("unix:{}", dir.path().join("f").display())).is_err());
}
