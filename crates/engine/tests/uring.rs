//! RAID5, RAID6 and RAID10 over `O_DIRECT` file members, where the engine runs each request's member
//! operations on io_uring: random writes and reads against a model, a member failed by a
//! real I/O error (its file shrunk under it), degraded reads and writes, a rebuild onto a
//! spare, a second loss that must be served from the rebuilt spare, parity checked clean.
//! The member counters prove the ring carried the requests. The same tests run again in a
//! child process with `URAID_NO_IO_URING=1`, where everything must go through the pool.

mod common;

use common::{check_clean, random_writes, read_all, sector_writes, write_created, Rng, Shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_engine::array::JobKind;
use uraid_engine::member::{IoMode, IoStats};
use uraid_engine::{io_uring_unavailable, Array, ArrayOptions, FileMember, Member};

/// This process runs with io_uring turned off (the child of the fallback test).
fn switched_off() -> bool {
    std::env::var_os("URAID_NO_IO_URING").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Must the ring have carried member I/O in this process? Yes, unless it is switched off or
/// the kernel or sandbox refuses io_uring (said so on stderr); any other failure to set it
/// up fails the test.
fn ring_expected() -> bool {
    match io_uring_unavailable() {
        None => {
            assert!(!switched_off(), "URAID_NO_IO_URING=1 but the engine uses io_uring");
            true
        }
        Some(why) if switched_off() => {
            assert!(why.contains("URAID_NO_IO_URING"), "{why}");
            false
        }
        Some(why) => {
            let kernel_off = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|s| s.trim() != "0");
            assert!(kernel_off || why.contains("not permitted") || why.contains("not implemented"), "io_uring should work here: {why}");
            eprintln!("io_uring unavailable here ({why}): only the pool path is tested");
            false
        }
    }
}

fn open_direct(paths: &[PathBuf]) -> Vec<Arc<FileMember>> {
    paths.iter().map(|p| Arc::new(FileMember::open_with(p, true, IoMode::Direct).expect("/tmp supports O_DIRECT"))).collect()
}

fn dyns(members: &[Arc<FileMember>]) -> Vec<Arc<dyn Member>> {
    members.iter().map(|m| m.clone() as Arc<dyn Member>).collect()
}

/// Random reads of any size and offset against the model.
fn random_reads(a: &Array, model: &[u8], rng: &mut Rng, count: usize, what: &str) {
    for _ in 0..count {
        let len = 1 + rng.below(200_000).min(model.len() as u64 - 1) as usize;
        let off = rng.below((model.len() - len) as u64 + 1) as usize;
        let mut got = vec![0u8; len];
        a.read(off as u64, &mut got).unwrap_or_else(|e| panic!("{what}: read {len}@{off}: {e}"));
        assert!(got == model[off..off + len], "{what}: read {len}@{off} differs from the model");
    }
}

/// `shrunk`: the member that fails by I/O error (one that reads are served from); `later`:
/// the roles lost after the rebuild, so that reads must use the rebuilt spare.
fn scenario(shape: Shape, seed: u64, shrunk: usize, later: &[usize]) {
    let ring = ring_expected();
    let what = format!("{:?}, chunk {}K", shape.level, shape.chunk_kib);
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let paths: Vec<PathBuf> = (0..shape.disks + shape.spares).map(|i| dir.path().join(format!("d{i}.img"))).collect();
    for p in &paths {
        std::fs::File::create(p).unwrap().set_len(shape.member_bytes as u64).unwrap();
    }
    let all = open_direct(&paths);
    let (members, spares) = all.split_at(shape.disks);
    write_created(&shape, &dyns(members), &dyns(spares));
    let mut opts = ArrayOptions { writable: true, ..Default::default() };
    opts.assemble.run = false;
    let a = Array::assemble(dyns(&all), &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"));
    let mut model = vec![0u8; a.size_bytes() as usize];
    let mut rng = Rng::new(seed);

    random_writes(&a, &mut model, &mut rng, 60);
    sector_writes(&a, &mut model, &mut rng, 40, 8);
    random_reads(&a, &model, &mut rng, 60, &format!("{what}, healthy"));
    assert!(read_all(&a) == model, "{what}: healthy read");
    let before_failure: IoStats = all.iter().map(|m| m.io_stats()).sum();

    // A member loses its second half: the next full read hits the end of its file, which
    // must fail that member (only) and be served by reconstruction or the other copy.
    shrink(&paths[shrunk], shape.member_bytes as u64 / 2);
    assert!(read_all(&a) == model, "{what}: read across the failing member");
    let failure = a.devices()[shrunk].failure.clone().unwrap_or_else(|| panic!("{what}: member {shrunk} not failed: {:?}", a.devices()));
    assert!(failure.contains("short read"), "{what}: {failure}");
    assert_eq!(a.devices().iter().filter(|d| d.failure.is_some()).count(), 1, "{what}: {:?}", a.devices());
    assert_eq!(a.pending_job(), Some(JobKind::Recovery), "{what}: the spare is not taken");

    // Degraded, while the spare is rebuilt in steps.
    random_reads(&a, &model, &mut rng, 30, &format!("{what}, degraded"));
    a.recovery_step(256).unwrap();
    random_writes(&a, &mut model, &mut rng, 30);
    sector_writes(&a, &mut model, &mut rng, 20, 8);
    let mut steps = 0;
    while a.pending_job() == Some(JobKind::Recovery) {
        a.recovery_step(1 << 12).expect("recovery step");
        steps += 1;
        assert!(steps < 100_000);
    }
    assert!(a.missing_roles().is_empty(), "{what}: {:?}", a.missing_roles());
    assert!(read_all(&a) == model, "{what}: after the rebuild");
    assert_eq!(check_clean(&a).mismatch_sectors, 0, "{what}: parity after the rebuild");

    // Lose other members: the data must come from the rebuilt spare.
    for &role in later {
        a.fail_role(role).unwrap();
    }
    random_reads(&a, &model, &mut rng, 30, &format!("{what}, degraded after the rebuild"));
    random_writes(&a, &mut model, &mut rng, 20);
    assert!(read_all(&a) == model, "{what}: degraded after the rebuild");
    a.close().unwrap();
    drop(a);

    let stats: IoStats = all.iter().map(|m| m.io_stats()).sum();
    eprintln!("{what}: member I/O {stats:?} (healthy part: {before_failure:?})");
    assert_eq!(stats.einval_fallbacks, 0, "{what}: {stats:?}");
    assert!(before_failure.direct + before_failure.bounced > 0, "{what}: {before_failure:?}");
    if ring {
        // Healthy reads and writes of a request fan out over several members: on the ring.
        assert!(before_failure.uring * 2 > before_failure.direct + before_failure.bounced, "{what}: {before_failure:?}");
    } else {
        assert_eq!(stats.uring, 0, "{what}: {stats:?}");
    }
}

fn shrink(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

#[test]
fn raid5_over_direct_members_on_io_uring() {
    scenario(Shape::new(Level::Raid5, 4).spares(1), 0x0115_0005, 1, &[0]);
}

#[test]
fn raid6_over_direct_members_on_io_uring() {
    let mut shape = Shape::new(Level::Raid6, 5).spares(1);
    shape.chunk_kib = 4;
    scenario(shape, 0x0115_0006, 1, &[0, 2]);
}

/// Mirrored writes (`write_copies`) and reads of a RAID10 (near 2, reads from the first copy):
/// member 0 shrinks, the spare takes its role, then its mirror (role 1) is lost and the spare
/// must serve the data.
#[test]
fn raid10_over_direct_members_on_io_uring() {
    scenario(Shape::new(Level::Raid10, 4).spares(1), 0x0115_0010, 0, &[1]);
}

/// The tests above again, in a child process whose engine may not use io_uring.
#[test]
fn the_same_tests_pass_on_the_pool_without_io_uring() {
    if switched_off() {
        return; // the child itself
    }
    let tests =
        ["raid5_over_direct_members_on_io_uring", "raid6_over_direct_members_on_io_uring", "raid10_over_direct_members_on_io_uring"];
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("URAID_NO_IO_URING", "1")
        .args(["--exact", "--nocapture", "--test-threads", "2"])
        .args(tests)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    assert!(out.status.success(), "the child failed");
    assert!(text.contains(&format!("{} passed", tests.len())), "the child did not run every test");
}
