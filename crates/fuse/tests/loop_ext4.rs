//! The promise of the FUSE export: a kernel filesystem on a uraid array. RAID5 over four
//! files, exported through FUSE, attached as a loop device, formatted ext4, filled with
//! files of known sha256, checked by e2fsck, remounted and verified.

mod common;

use common::*;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uraid_core::geometry::Level;
use uraid_engine::array::CheckReport;
use uraid_engine::{FileMember, Member};
use uraid_fuse::{mount, FuseError, FuseMount, UnmountOutcome};

/// Detaches the loop device when dropped, so a failing test leaves none behind.
struct LoopGuard(Option<String>);
impl LoopGuard {
    fn detach(&mut self) {
        if let Some(dev) = self.0.take() {
            let _ = std::process::Command::new("losetup").arg("-d").arg(&dev).status();
        }
    }
}
impl Drop for LoopGuard {
    fn drop(&mut self) {
        self.detach();
    }
}

/// Unmounts a kernel mount when dropped (lazily if busy, so a failure cannot wedge it).
struct MountGuard(Option<PathBuf>);
impl MountGuard {
    fn umount(&mut self) {
        if let Some(dir) = self.0.take() {
            let ok = std::process::Command::new("umount").arg(&dir).status().map(|s| s.success()).unwrap_or(false);
            if !ok {
                let _ = std::process::Command::new("umount").arg("-l").arg(&dir).status();
            }
        }
    }
}
impl Drop for MountGuard {
    fn drop(&mut self) {
        self.umount();
    }
}

fn sha256_file(p: &Path) -> [u8; 32] {
    let data = std::fs::read(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    Sha256::digest(&data).into()
}

/// Unmounts the FUSE export, retrying while a just-detached loop device lets go of it (the
/// kernel releases the file asynchronously). Still busy after a minute is a hang, not a slow
/// machine.
fn unmount_fuse(m: &mut FuseMount) -> UnmountOutcome {
    const HANG_GUARD: Duration = Duration::from_secs(60);
    let start = Instant::now();
    loop {
        match m.unmount() {
            Err(FuseError::Busy(_)) if start.elapsed() < HANG_GUARD => std::thread::sleep(Duration::from_millis(50)),
            Err(FuseError::Busy(dir)) => panic!("{} still busy {HANG_GUARD:?} after the loop device was detached: hung", dir.display()),
            other => return other.expect("unmount FUSE"),
        }
    }
}

#[test]
fn ext4_on_loop_on_fuse_on_raid5() {
    if let Some(why) = fuse_unavailable() {
        uraid_testkit::skip("fuse loop_ext4", &why);
        return;
    }
    if !is_root() {
        uraid_testkit::skip("fuse loop_ext4", "losetup and mount need root");
        return;
    }
    for tool in ["losetup", "mkfs.ext4", "e2fsck", "mount", "umount"] {
        if !have(tool) {
            uraid_testkit::skip("fuse loop_ext4", &format!("{tool} is missing (util-linux, e2fsprogs, mount)"));
            return;
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        uraid_testkit::skip("fuse loop_ext4", "/dev/loop-control is missing (no loop devices here)");
        return;
    }
    let t0 = Instant::now();
    let work = tempfile::tempdir().expect("tempdir");
    let member_bytes = 32u64 << 20;
    let paths: Vec<PathBuf> = (0..4).map(|i| work.path().join(format!("m{i}.img"))).collect();
    for p in &paths {
        std::fs::File::create(p).and_then(|f| f.set_len(member_bytes)).expect("member file");
    }
    let open_members = || -> Vec<Arc<dyn Member>> {
        paths.iter().map(|p| Arc::new(FileMember::open(p, true).expect("open member")) as Arc<dyn Member>).collect()
    };
    let members = open_members();
    create(Level::Raid5, &members, 64);
    let array = Arc::new(assemble(&members, true));
    let fuse_dir = work.path().join("fuse");
    let mnt_dir = work.path().join("mnt");
    std::fs::create_dir(&fuse_dir).expect("mkdir fuse");
    std::fs::create_dir(&mnt_dir).expect("mkdir mnt");

    // Guards are declared in mount order, so on a failure they unwind in reverse: ext4
    // unmounted, loop detached, FUSE unmounted (lazily if the loop has not let go yet).
    let mut fuse = mount(&fuse_dir, vec![("r5.img".into(), array.clone())], Arc::new(AtomicBool::new(false))).expect("mount FUSE");
    let image = fuse.files()[0].clone();
    let dev = run("losetup", &["--find", "--show", image.to_str().expect("path")]).trim().to_string();
    assert!(dev.starts_with("/dev/loop"), "losetup said {dev:?}");
    let mut lo = LoopGuard(Some(dev.clone()));
    run("mkfs.ext4", &["-q", "-F", &dev]);
    run("mount", &[&dev, mnt_dir.to_str().expect("path")]);
    let mut ext4 = MountGuard(Some(mnt_dir.clone()));

    // A tree of files: sizes from empty to a few MiB, some not a multiple of the block.
    let mut rng = Rng::new(0xfeed_f00d);
    let mut expected: Vec<(PathBuf, [u8; 32])> = Vec::new();
    let sizes = [0usize, 1, 511, 4096, 65_537, 200_000, 1 << 20, 3 << 20, 5_000_123];
    for d in 0..3 {
        let sub = mnt_dir.join(format!("dir{d}")).join("nested");
        std::fs::create_dir_all(&sub).expect("mkdir in ext4");
        for (i, &len) in sizes.iter().enumerate() {
            let data = rng.bytes(len);
            let p = sub.join(format!("f{i}.bin"));
            std::fs::write(&p, &data).expect("write into ext4");
            expected.push((p.strip_prefix(&mnt_dir).expect("prefix").to_path_buf(), Sha256::digest(&data).into()));
        }
    }
    run("sync", &[]);
    ext4.umount();
    run("e2fsck", &["-fn", &dev]);

    run("mount", &[&dev, mnt_dir.to_str().expect("path")]);
    ext4 = MountGuard(Some(mnt_dir.clone()));
    for (rel, sum) in &expected {
        assert_eq!(&sha256_file(&mnt_dir.join(rel)), sum, "{} changed", rel.display());
    }
    ext4.umount();
    lo.detach();
    assert_eq!(unmount_fuse(&mut fuse), UnmountOutcome::Clean);
    drop(fuse);
    array.close().expect("close array");
    drop(array);
    drop(members);

    // Everything again from the member files alone, through a fresh array and stack, read
    // only: what ext4 wrote reached the members, and RAID5 parity agrees with the data.
    let array = Arc::new(assemble(&open_members(), false));
    let mut report = CheckReport::default();
    let mut pos = 0;
    while pos < array.sync_sectors() {
        pos = array.check_step(pos, 1 << 16, false, &mut report).expect("check").done_sectors;
    }
    assert_eq!(report.mismatch_sectors, 0, "parity mismatches after the ext4 workload: {report:?}");
    // Assigned, not shadowed, so the guards still unwind after it (ext4, loop, FUSE).
    fuse = mount(&fuse_dir, vec![("r5.img".into(), array.clone())], Arc::new(AtomicBool::new(false))).expect("remount FUSE");
    let dev = run("losetup", &["--find", "--show", "--read-only", fuse.files()[0].to_str().expect("path")]).trim().to_string();
    lo = LoopGuard(Some(dev.clone()));
    run("e2fsck", &["-fn", &dev]);
    run("mount", &["-o", "ro", &dev, mnt_dir.to_str().expect("path")]);
    ext4 = MountGuard(Some(mnt_dir.clone()));
    for (rel, sum) in &expected {
        assert_eq!(&sha256_file(&mnt_dir.join(rel)), sum, "{} differs after reassembly", rel.display());
    }
    ext4.umount();
    lo.detach();
    assert_eq!(unmount_fuse(&mut fuse), UnmountOutcome::Clean);
    println!("ext4 on loop on FUSE on RAID5: {} files verified in {:?}", expected.len(), t0.elapsed());
}
