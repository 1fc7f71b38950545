//! The NBD client as an array member, against uraid's own server and against nbdkit
//! (installed by scripts/setup; without it these tests fail under CI and skip otherwise).
//! Waits are for events (a socket accepting, a process gone) under a hang guard.

mod common;

use common::{Rng, Running, HANG_GUARD};
use std::sync::Arc;
use std::time::Duration;
use uraid_core::geometry::Level;
use uraid_engine::{Array, ArrayOptions, Member};
use uraid_nbd::{ClientOptions, Export, NbdMember, NbdUri};
use uraid_testkit::nbdkit::Nbdkit;

fn connect(uri: &str, options: ClientOptions) -> Arc<NbdMember> {
    let uri = NbdUri::parse(uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
    Arc::new(NbdMember::connect(&uri, true, options).unwrap_or_else(|e| panic!("connect {uri}: {e}")))
}

/// Random reads and writes through the member, checked against a model.
fn member_round_trip(m: &NbdMember, seed: u64) {
    let size = m.size_bytes();
    let mut model = vec![0u8; size as usize];
    m.read_at(&mut model, 0).expect("read all");
    let mut rng = Rng::new(seed);
    for _ in 0..200 {
        let len = (1 + rng.below(300_000)).min(size);
        let off = rng.below(size - len + 1);
        if rng.below(2) == 0 {
            let data = rng.bytes(len as usize);
            m.write_at(&data, off).expect("write");
            model[off as usize..(off + len) as usize].copy_from_slice(&data);
        } else {
            let mut got = vec![0u8; len as usize];
            m.read_at(&mut got, off).expect("read");
            assert!(got == model[off as usize..(off + len) as usize], "read {len}@{off}");
        }
    }
    // Vectored runs (one request each) land where the buffers say.
    let (a, b) = (rng.bytes(4096), rng.bytes(65536));
    let off = rng.below(size - 69632) / 512 * 512;
    m.write_vectored_at(&[&a, &b], off).expect("vectored write");
    model[off as usize..off as usize + 4096].copy_from_slice(&a);
    model[off as usize + 4096..off as usize + 69632].copy_from_slice(&b);
    let (mut x, mut y) = (vec![0u8; 512], vec![0u8; 69120]);
    m.read_vectored_at(&mut [&mut x, &mut y], off).expect("vectored read");
    assert!(x == model[off as usize..off as usize + 512] && y == model[off as usize + 512..off as usize + 69632]);
    m.flush().expect("flush");
    let mut all = vec![0u8; size as usize];
    m.read_at(&mut all, 0).expect("read all");
    assert!(all == model);
    // Out of range: refused here, before anything is sent.
    assert!(m.read_at(&mut [0u8; 512], size - 511).is_err());
    assert!(m.write_at(&[0u8; 1], size).is_err());
}

#[test]
fn the_client_speaks_to_uraids_own_server() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let server = Running::start(&format!("unix:{}", sock.display()), vec![Export::new(common::array(Level::Raid5, 4, 4 << 20, "r5"))]);
    let m = connect(&server.uris[0], ClientOptions::default());
    assert!(m.connection_count() > 1, "uraid's server allows multi-conn");
    member_round_trip(&m, 7);
    let tcp = Running::start("127.0.0.1:0", vec![Export::new(common::array(Level::Raid1, 2, 2 << 20, "r1"))]);
    member_round_trip(&connect(&tcp.uris[0], ClientOptions::default()), 8);
    // An export that does not exist: a clear error at connect.
    let bad = NbdUri::parse(&format!("nbd+unix:///nope?socket={}", sock.display())).unwrap();
    let err = NbdMember::connect(&bad, true, ClientOptions::default()).err().expect("refused");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
}

// ------------------------------------------------------------------ nbdkit

fn have_nbdkit() -> bool {
    uraid_testkit::nbdkit::available("nbd client vs nbdkit")
}

#[test]
fn an_array_over_nbdkit_members_works_and_reassembles() {
    if !have_nbdkit() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kits: Vec<Nbdkit> = (0..4).map(|i| Nbdkit::start(&dir.path().join(format!("m{i}.sock")), &["memory", "16M"])).collect();
    let open = || -> Vec<Arc<dyn Member>> { kits.iter().map(|k| connect(&k.uri(), ClientOptions::default()) as Arc<dyn Member>).collect() };
    let members = open();
    common::create_on(Level::Raid5, &members);
    let (array, _) = Array::assemble(members, &ArrayOptions { writable: true, ..Default::default() }).expect("assemble");
    let mut model = vec![0u8; array.size_bytes() as usize];
    array.read(0, &mut model).expect("read");
    let mut rng = Rng::new(11);
    for _ in 0..60 {
        let len = 1 + rng.below(200_000) as usize;
        let off = rng.below(model.len() as u64 - len as u64) as usize;
        let data = rng.bytes(len);
        array.write(off as u64, &data).expect("write");
        model[off..off + len].copy_from_slice(&data);
    }
    array.close().expect("close");
    drop(array);
    // New connections, new array: the data and superblocks went to the servers.
    let (array, report) = Array::assemble(open(), &ArrayOptions::default()).expect("assemble again");
    assert!(!report.needs_resync, "closed clean");
    let mut got = vec![0u8; model.len()];
    array.read(0, &mut got).expect("read");
    assert!(got == model, "the array reads back what was written");
}

#[test]
fn the_member_round_trips_through_nbdkit() {
    if !have_nbdkit() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kit = Nbdkit::start(&dir.path().join("r.sock"), &["memory", "8M"]);
    let m = connect(&kit.uri(), ClientOptions::default());
    assert!(m.connection_count() > 1, "nbdkit's memory plugin allows multi-conn");
    member_round_trip(&m, 3);
}

#[test]
fn a_server_error_is_reported_with_its_errno() {
    if !have_nbdkit() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let trigger = dir.path().join("errors-on");
    let kit = Nbdkit::start(
        &dir.path().join("e.sock"),
        &["--filter=error", "memory", "4M", "error-pread=EIO", "error-pread-rate=100%", &format!("error-pread-file={}", trigger.display())],
    );
    let m = connect(&kit.uri(), ClientOptions::default());
    m.write_at(&[7u8; 4096], 0).unwrap();
    std::fs::write(&trigger, b"").unwrap();
    let err = m.read_at(&mut [0u8; 4096], 0).expect_err("the filter fails reads");
    assert_eq!(err.raw_os_error(), Some(5), "EIO, a medium error the array rebuilds: {err}");
    assert!(uraid_engine::member::is_medium_error(&err));
    std::fs::remove_file(&trigger).unwrap();
    let mut b = [0u8; 4096];
    m.read_at(&mut b, 0).expect("reads work again, on the same connection");
    assert_eq!(b, [7u8; 4096]);
}

#[test]
fn a_server_restart_is_ridden_out_and_lost_unflushed_writes_are_reported() {
    if !have_nbdkit() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    std::fs::write(&image, vec![0u8; 4 << 20]).unwrap();
    let mut kit = Nbdkit::start(&dir.path().join("f.sock"), &["file", &format!("file={}", image.display())]);
    let m = connect(&kit.uri(), ClientOptions { connections: 2, failfast: HANG_GUARD, ..Default::default() });

    // Flushed, then the server restarts: requests carry on over new connections.
    m.write_at(&[1u8; 8192], 0).unwrap();
    m.flush().unwrap();
    kit.restart();
    let mut b = vec![0u8; 8192];
    m.read_at(&mut b, 0).expect("a read after the restart");
    assert!(b.iter().all(|&x| x == 1));
    m.flush().expect("nothing unflushed was lost");

    // Written, not flushed, then the server goes: the next flush must not claim durability.
    m.write_at(&[2u8; 4096], 0).unwrap();
    kit.restart();
    m.read_at(&mut b, 0).expect("a read after the restart");
    let err = m.flush().expect_err("writes since the last flush may be lost");
    assert!(!uraid_engine::member::is_medium_error(&err), "a lost connection is not a bad sector: {err}");
    m.flush().expect("reported once; later flushes cover later writes");
}

#[test]
fn a_member_unreachable_past_failfast_fails_its_requests() {
    if !have_nbdkit() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut kit = Nbdkit::start(&dir.path().join("g.sock"), &["memory", "4M"]);
    let m = connect(&kit.uri(), ClientOptions { connections: 1, failfast: Duration::from_millis(300), ..Default::default() });
    m.read_at(&mut [0u8; 512], 0).unwrap();
    kit.kill();
    let err = m.read_at(&mut [0u8; 512], 0).expect_err("nobody serves it");
    assert_eq!(err.kind(), std::io::ErrorKind::NotConnected, "{err}");
    assert!(!uraid_engine::member::is_medium_error(&err), "the array fails such a member at once");
}
