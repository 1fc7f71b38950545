//! The exported file behaves as the array: random I/O through std::fs against a model,
//! fixed-size semantics, and the data is on the members after unmount and reassembly.

mod common;

use common::*;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uraid_core::geometry::Level;
use uraid_engine::{MemMember, Member};
use uraid_fuse::{mount, FuseError, UnmountOutcome};

fn mem_members(n: usize, bytes: usize, tag: &str) -> Vec<Arc<dyn Member>> {
    (0..n).map(|i| Arc::new(MemMember::zeroed(format!("{tag}{i}"), bytes)) as Arc<dyn Member>).collect()
}

/// How long a test waits for something that must happen before calling it hung: far beyond
/// any machine's slowness, so it never decides a verdict by speed.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(-1)
}

#[test]
fn random_io_matches_model_and_survives_reassembly() {
    if let Some(why) = fuse_unavailable() {
        uraid_testkit::skip("fuse file_io", &why);
        return;
    }
    // RAID5 over 4 x 8 MiB (writable) and a read-only RAID1, to see two files and both modes.
    let r5 = mem_members(4, 8 << 20, "r5-");
    create(Level::Raid5, &r5, 64);
    let a5 = Arc::new(assemble(&r5, true));
    let r1 = mem_members(2, 4 << 20, "r1-");
    create(Level::Raid1, &r1, 64);
    let a1 = Arc::new(assemble(&r1, false));
    let size = a5.size_bytes();
    let mut model = vec![0u8; size as usize];
    a5.read(0, &mut model).expect("read initial array");

    let dir = tempfile::tempdir().expect("tempdir");
    let stop = Arc::new(AtomicBool::new(false));
    let mut m = mount(dir.path(), vec![("data.img".into(), a5.clone()), ("mirror.img".into(), a1.clone())], stop).expect("mount");
    assert!(is_mount_point(dir.path()));
    assert_eq!(m.files(), &[dir.path().join("data.img"), dir.path().join("mirror.img")]);

    // Directory and metadata.
    let mut names: Vec<String> =
        std::fs::read_dir(dir.path()).expect("readdir").map(|e| e.expect("entry").file_name().into_string().expect("utf8")).collect();
    names.sort();
    assert_eq!(names, ["data.img", "mirror.img"]);
    let md = std::fs::metadata(dir.path().join("data.img")).expect("stat");
    assert!(md.is_file());
    assert_eq!(md.len(), size);
    assert_eq!(md.permissions().mode() & 0o777, 0o600);
    let mm = std::fs::metadata(dir.path().join("mirror.img")).expect("stat mirror");
    assert_eq!(mm.len(), a1.size_bytes());
    assert_eq!(mm.permissions().mode() & 0o777, 0o400);

    // Random writes of mixed sizes and alignments, several threads on disjoint quarters
    // (FUSE worker threads and parallel direct writes), each checked by reading back.
    let path = dir.path().join("data.img");
    let quarter = size / 4;
    let results: Vec<Vec<(u64, Vec<u8>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let path = path.clone();
                s.spawn(move || {
                    let f = OpenOptions::new().read(true).write(true).open(&path).expect("open rw");
                    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ (t + 1));
                    let mut done = Vec::new();
                    for _ in 0..60 {
                        let len = match rng.below(4) {
                            0 => 1 + rng.below(700),
                            1 => 512 * (1 + rng.below(16)),
                            2 => 4096 * (1 + rng.below(64)),
                            _ => 1 + rng.below(3 << 20),
                        }
                        .min(quarter);
                        let off = t * quarter + rng.below(quarter - len + 1);
                        let data = rng.bytes(len as usize);
                        f.write_all_at(&data, off).expect("write_at");
                        let mut back = vec![0u8; len as usize];
                        f.read_exact_at(&mut back, off).expect("read_at");
                        assert!(back == data, "thread {t}: read-back mismatch at {off}+{len}");
                        done.push((off, data));
                    }
                    f.sync_all().expect("fsync");
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for (off, data) in results.into_iter().flatten() {
        model[off as usize..off as usize + data.len()].copy_from_slice(&data);
    }

    let f = OpenOptions::new().read(true).write(true).open(&path).expect("open rw");
    // Random reads anywhere, including across the quarters and to the very end.
    let mut rng = Rng::new(7);
    for _ in 0..200 {
        let len = 1 + rng.below(2 << 20).min(size - 1);
        let off = rng.below(size - len + 1);
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, off).expect("read_at");
        assert!(buf == model[off as usize..(off + len) as usize], "mismatch at {off}+{len}");
    }
    // The whole file through a plain sequential read.
    let all = std::fs::read(&path).expect("read whole file");
    assert!(all == model, "whole-file read differs from the model");
    // The engine sees the same bytes as the file (no cache in between).
    let mut direct = vec![0u8; 1 << 20];
    a5.read(size / 2, &mut direct).expect("engine read");
    assert!(direct == model[(size / 2) as usize..(size / 2) as usize + (1 << 20)]);
    // And the file sees writes made to the array behind its back (NBD would do this).
    a5.write(4096, &[0xab; 8192]).expect("engine write");
    model[4096..4096 + 8192].fill(0xab);
    let mut seen = vec![0u8; 8192];
    f.read_exact_at(&mut seen, 4096).expect("read after engine write");
    assert!(seen.iter().all(|&b| b == 0xab), "the file served stale data after an array write");

    // Fixed size: reads stop at the end, writes past it fail, truncation is refused.
    let mut tail = [0u8; 100];
    assert_eq!(f.read_at(&mut tail, size).expect("read at end"), 0);
    assert_eq!(f.read_at(&mut tail, size - 10).expect("read over end"), 10);
    assert_eq!(&tail[..10], &model[size as usize - 10..]);
    let e = f.write_at(&[1, 2, 3], size).expect_err("write past end");
    assert_eq!(errno(&e), libc_consts::ENOSPC, "{e}");
    assert_eq!(f.write_at(&[7; 20], size - 5).expect("short write at end"), 5);
    model[size as usize - 5..].fill(7);
    let e = f.set_len(size / 2).expect_err("truncate");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    f.set_len(size).expect("set_len to the same size is allowed");
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), size);

    // Zeroing through fallocate: ZERO_RANGE writes zeros; PUNCH_HOLE is refused.
    if have("fallocate") {
        run("fallocate", &["-z", "-o", "1000", "-l", "70000", path.to_str().expect("path")]);
        model[1000..71000].fill(0);
        let out = std::process::Command::new("fallocate")
            .args(["-p", "-o", "0", "-l", "4096", path.to_str().expect("path")])
            .output()
            .expect("fallocate -p");
        assert!(!out.status.success(), "punch hole should be refused");
        // util-linux words EOPNOTSUPP for a KEEP_SIZE mode as "keep size mode is unsupported".
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(why.contains("unsupported") || why.contains("not supported"), "{why}");
    } else {
        println!("fallocate(1) missing: zero-range not exercised");
    }

    // The directory is fixed and the read-only array is read-only.
    let e = File::create(dir.path().join("new.img")).expect_err("create");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    let e = std::fs::remove_file(&path).expect_err("unlink");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    let e = std::fs::create_dir(dir.path().join("d")).expect_err("mkdir");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    let e = std::fs::rename(&path, dir.path().join("x.img")).expect_err("rename");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    let e = File::create(&path).expect_err("O_TRUNC");
    assert_eq!(errno(&e), libc_consts::EPERM, "{e}");
    if is_root() {
        // Root bypasses mode bits, so the engine's read-only gate is what answers.
        let e = OpenOptions::new().write(true).open(dir.path().join("mirror.img")).expect_err("write-open a read-only array");
        assert_eq!(errno(&e), libc_consts::EROFS, "{e}");
    }
    let mirror = std::fs::read(dir.path().join("mirror.img")).expect("read mirror");
    assert_eq!(mirror.len() as u64, a1.size_bytes());

    f.sync_all().expect("fsync");
    // While a file is open the mount is busy: unmount says so and keeps serving.
    match m.unmount() {
        Err(FuseError::Busy(_)) => {}
        other => panic!("unmount with an open file: {other:?}"),
    }
    let mut one = [0u8; 1];
    f.read_exact_at(&mut one, 0).expect("still served after a busy unmount");
    drop(f);
    assert_eq!(m.unmount().expect("unmount"), UnmountOutcome::Clean);
    assert!(!is_mount_point(dir.path()));
    assert!(!m.is_mounted());
    drop(m);

    // Reassemble from the members: everything written through FUSE is there.
    a5.close().expect("close array");
    drop(a5);
    let again = assemble(&r5, false);
    let mut got = vec![0u8; size as usize];
    again.read(0, &mut got).expect("read reassembled");
    assert!(got == model, "reassembled array differs from the model");
}

#[test]
fn stop_flag_and_drop_unmount() {
    if let Some(why) = fuse_unavailable() {
        uraid_testkit::skip("fuse file_io", &why);
        return;
    }
    let members = mem_members(2, 2 << 20, "s-");
    create(Level::Raid1, &members, 64);
    let array = Arc::new(assemble(&members, true));

    // Setting the stop flag unmounts; wait() reports how.
    let dir = tempfile::tempdir().expect("tempdir");
    let stop = Arc::new(AtomicBool::new(false));
    let m = mount(dir.path(), vec![("a".into(), array.clone())], stop.clone()).expect("mount");
    // Not std::fs::write: its O_TRUNC would ask to shrink the file, which is refused.
    OpenOptions::new().write(true).open(dir.path().join("a")).and_then(|f| f.write_all_at(b"hello", 0)).expect("write through fuse");
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || tx.send(m.wait()).expect("send the outcome"));
    // Nothing but the stop flag (or an external unmount) may end the wait.
    assert!(!waiter.is_finished(), "wait() returned before the stop flag was set");
    assert!(is_mount_point(dir.path()));
    stop.store(true, Ordering::Release);
    let outcome = rx.recv_timeout(HANG_GUARD).unwrap_or_else(|_| panic!("the stop flag did not end the mount within {HANG_GUARD:?}: hung"));
    waiter.join().expect("join");
    assert_eq!(outcome.expect("wait"), UnmountOutcome::Clean);
    assert!(!is_mount_point(dir.path()));
    let mut five = [0u8; 5];
    array.read(0, &mut five).expect("read");
    assert_eq!(&five, b"hello");

    // Dropping the handle unmounts.
    let stop = Arc::new(AtomicBool::new(false));
    let m = mount(dir.path(), vec![("a".into(), array.clone())], stop).expect("mount again");
    assert!(is_mount_point(dir.path()));
    drop(m);
    assert!(!is_mount_point(dir.path()));

    // Dropped while a file is open (a test failing with a loop device attached): detached
    // lazily at once, the directory is free, and the open file keeps working until closed.
    let stop = Arc::new(AtomicBool::new(false));
    let m = mount(dir.path(), vec![("a".into(), array.clone())], stop).expect("mount busy");
    let held = File::open(dir.path().join("a")).expect("open");
    // `held` stays open until after the drop returns, so a drop that waited for it to close
    // would never return: the hang guard, not a time budget, tells.
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(m);
        tx.send(()).expect("send");
    });
    rx.recv_timeout(HANG_GUARD).unwrap_or_else(|_| panic!("drop of a busy mount did not return within {HANG_GUARD:?}: hung"));
    dropper.join().expect("join");
    assert!(!is_mount_point(dir.path()));
    let mut again = [0u8; 5];
    held.read_exact_at(&mut again, 0).expect("read through a detached mount");
    assert_eq!(&again, b"hello");
    drop(held);

    // An external unmount is noticed.
    if is_root() && have("umount") {
        let stop = Arc::new(AtomicBool::new(false));
        let m = mount(dir.path(), vec![("a".into(), array.clone())], stop).expect("mount a third time");
        run("umount", &[dir.path().to_str().expect("path")]);
        assert_eq!(m.wait().expect("wait"), UnmountOutcome::External);
    }

    // Bad names are refused before mounting.
    let stop = Arc::new(AtomicBool::new(false));
    for bad in ["", ".", "..", "a/b"] {
        assert!(matches!(mount(dir.path(), vec![(bad.into(), array.clone())], stop.clone()), Err(FuseError::InvalidName(_))));
    }
    assert!(matches!(
        mount(dir.path(), vec![("x".into(), array.clone()), ("x".into(), array.clone())], stop),
        Err(FuseError::DuplicateName(_))
    ));
    assert!(!is_mount_point(dir.path()));
}

/// errno values used above (Linux), kept here so the test needs no libc crate.
mod libc_consts {
    pub const EPERM: i32 = 1;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
}
