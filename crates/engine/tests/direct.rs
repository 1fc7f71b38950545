//! Direct I/O (`O_DIRECT`) members: seeded random operations against a buffered oracle, a
//! 4 KiB-sector loop device in `Auto` mode, and a RAID5 over direct members, degraded.

mod common;

use common::{random_writes, read_all, sector_writes, write_created, Rng, Shape};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_engine::member::{IoMode, IoStats, BOUNCE_BYTES};
use uraid_engine::{Array, ArrayOptions, FileMember, Member};
use uraid_parity::buffer::AlignedBuf;

fn sized_file(path: &Path, bytes: u64) {
    std::fs::File::create(path).unwrap().set_len(bytes).unwrap();
}

/// A buffer of `len` bytes starting `skew` bytes past an address aligned to `align`.
struct Buf {
    raw: AlignedBuf,
    skew: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, skew: usize, align: usize) -> Buf {
        Buf { raw: AlignedBuf::zeroed(len + skew, align), skew, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.raw[self.skew..self.skew + self.len]
    }
}

/// An offset and length: aligned to `align` (sometimes longer than a bounce buffer), whole
/// 512-byte sectors, or any bytes.
fn pick_range(rng: &mut Rng, size: u64, align: u64) -> (u64, usize) {
    let (unit, max_units) = match rng.below(8) {
        0 => (align, 3 * BOUNCE_BYTES as u64 / align),
        1..=3 => (align, 64),
        4 | 5 => (512, 128),
        _ => (1, 9000),
    };
    let len = unit * (1 + rng.below(max_units));
    let off = unit * rng.below((size - len) / unit + 1);
    (off, len as usize)
}

/// Memory skew: aligned, +1 byte, or +512 bytes.
fn pick_skew(rng: &mut Rng) -> usize {
    [0, 0, 1, 512][rng.below(4) as usize]
}

/// Cuts `len` into 1..=4 pieces: aligned ones when `aligned`, else random sizes.
fn split(rng: &mut Rng, len: usize, align: usize, aligned: bool) -> Vec<usize> {
    let mut parts = Vec::new();
    let mut left = len;
    while left > 0 && parts.len() < 3 {
        let n = if aligned { align * (1 + rng.below((left / align) as u64) as usize) } else { 1 + rng.below(left as u64) as usize };
        let n = n.min(left);
        parts.push(n);
        left -= n;
    }
    if left > 0 {
        parts.push(left);
    }
    parts
}

/// `count` seeded operations applied to `dut` and to a buffered `oracle` of the same size;
/// every read must match, and so must the whole contents at the end.
fn random_ops_match_oracle(dut: &FileMember, oracle: &dyn Member, seed: u64, count: usize) {
    let size = dut.size_bytes();
    assert_eq!(size, oracle.size_bytes());
    let (align, mem_align) = dut.direct_alignment().expect("direct mode");
    let buf_align = align.max(mem_align);
    let mut rng = Rng::new(seed);
    for i in 0..count {
        let (off, len) = pick_range(&mut rng, size, align as u64);
        let what = format!("op {i}: {len} bytes at {off}");
        match rng.below(10) {
            0..=2 => {
                let mut b = Buf::new(len, pick_skew(&mut rng), buf_align);
                rng.fill(b.get());
                dut.write_at(b.get(), off).unwrap_or_else(|e| panic!("{what}: {e}"));
                oracle.write_at(b.get(), off).unwrap();
            }
            3..=5 => {
                let mut b = Buf::new(len, pick_skew(&mut rng), buf_align);
                let mut want = vec![0u8; len];
                dut.read_at(b.get(), off).unwrap_or_else(|e| panic!("{what}: {e}"));
                oracle.read_at(&mut want, off).unwrap();
                assert!(b.get() == &want[..], "{what}: read differs");
            }
            6 | 7 => {
                // Vectored write, iovecs all aligned or mixed.
                let aligned = rng.below(2) == 0;
                let parts = split(&mut rng, len, align, aligned);
                let mut bufs: Vec<Buf> =
                    parts.iter().map(|&n| Buf::new(n, if aligned { 0 } else { pick_skew(&mut rng) }, buf_align)).collect();
                for b in &mut bufs {
                    rng.fill(b.get());
                }
                let slices: Vec<&[u8]> = bufs.iter_mut().map(|b| &*b.get()).collect();
                dut.write_vectored_at(&slices, off).unwrap_or_else(|e| panic!("{what} vectored {parts:?}: {e}"));
                oracle.write_vectored_at(&slices, off).unwrap();
            }
            8 => {
                let aligned = rng.below(2) == 0;
                let parts = split(&mut rng, len, align, aligned);
                let mut bufs: Vec<Buf> =
                    parts.iter().map(|&n| Buf::new(n, if aligned { 0 } else { pick_skew(&mut rng) }, buf_align)).collect();
                let mut slices: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.get()).collect();
                dut.read_vectored_at(&mut slices, off).unwrap_or_else(|e| panic!("{what} vectored {parts:?}: {e}"));
                let got: Vec<u8> = slices.concat();
                let mut want = vec![0u8; len];
                oracle.read_at(&mut want, off).unwrap();
                assert!(got == want, "{what}: vectored read {parts:?} differs");
            }
            _ => {
                if rng.below(2) == 0 {
                    dut.flush().unwrap();
                } else {
                    dut.discard(off, len as u64).unwrap_or_else(|e| panic!("{what}: discard: {e}"));
                    oracle.discard(off, len as u64).unwrap();
                }
            }
        }
    }
    dut.flush().unwrap();
    let mut got = vec![0u8; size as usize];
    let mut want = vec![0u8; size as usize];
    dut.read_at(&mut got, 0).unwrap();
    oracle.read_at(&mut want, 0).unwrap();
    assert!(got == want, "contents differ at the end");
}

fn assert_every_path_taken(s: IoStats) {
    eprintln!("{s:?}");
    assert!(s.direct > 0 && s.bounced > 0 && s.widened > 0, "{s:?}");
    assert_eq!(s.buffered, 0, "one O_DIRECT descriptor: nothing goes through the page cache: {s:?}");
    assert_eq!(s.einval_fallbacks, 0, "the kernel refused requests we thought aligned: {s:?}");
}

#[test]
fn direct_file_member_matches_a_buffered_oracle() {
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let (d, o) = (dir.path().join("direct.img"), dir.path().join("oracle.img"));
    sized_file(&d, 8 << 20);
    sized_file(&o, 8 << 20);
    let dut = FileMember::open_with(&d, true, IoMode::Direct).expect("/tmp supports O_DIRECT");
    let oracle = FileMember::open_with(&o, true, IoMode::Buffered).unwrap();
    random_ops_match_oracle(&dut, &oracle, 0xD1EC7, 400);
    assert_every_path_taken(dut.io_stats());
    assert_eq!(oracle.io_stats().direct + oracle.io_stats().bounced, 0);
    drop(dut);
    assert!(std::fs::read(&d).unwrap() == std::fs::read(&o).unwrap());
}

/// Detaches the loop device when dropped.
struct LoopDevice(PathBuf);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn auto_mode_goes_direct_on_a_4k_sector_loop_device() {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
        uraid_testkit::skip("direct: 4K-sector loop device", "needs root for losetup");
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let (backing, o) = (dir.path().join("backing.img"), dir.path().join("oracle.img"));
    sized_file(&backing, 64 << 20);
    sized_file(&o, 64 << 20);
    let out = match std::process::Command::new("losetup").args(["--find", "--show", "--sector-size", "4096"]).arg(&backing).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            uraid_testkit::skip(
                "direct: 4K-sector loop device",
                &format!("losetup failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            );
            return;
        }
        Err(e) => {
            uraid_testkit::skip("direct: 4K-sector loop device", &format!("no losetup: {e}"));
            return;
        }
    };
    let dev = LoopDevice(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    {
        let dut = FileMember::open(&dev.0, true).unwrap();
        assert_eq!(dut.io_mode(), IoMode::Direct, "Auto must go direct on a block device");
        assert_eq!(dut.direct_alignment().map(|a| a.0), Some(4096));
        assert_eq!(dut.size_bytes(), 64 << 20);
        let oracle = FileMember::open_with(&o, true, IoMode::Buffered).unwrap();
        random_ops_match_oracle(&dut, &oracle, 0x100B, 400);
        assert_every_path_taken(dut.io_stats());
    }
    // What reached the device (through the loop driver into the backing file) is right.
    drop(dev);
    assert!(std::fs::read(&backing).unwrap() == std::fs::read(&o).unwrap(), "backing file differs from the oracle");
}

fn assemble(members: &[Arc<FileMember>], run: bool) -> Array {
    let d: Vec<Arc<dyn Member>> = members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let mut opts = ArrayOptions { writable: true, ..Default::default() };
    opts.assemble.run = run;
    Array::assemble(d, &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"))
}

#[test]
fn raid5_over_direct_members_reads_back_healthy_degraded_and_reassembled() {
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let shape = Shape::new(Level::Raid5, 4);
    let paths: Vec<PathBuf> = (0..shape.disks).map(|i| dir.path().join(format!("d{i}.img"))).collect();
    let open_all = |paths: &[PathBuf]| -> Vec<Arc<FileMember>> {
        paths.iter().map(|p| Arc::new(FileMember::open_with(p, true, IoMode::Direct).unwrap())).collect()
    };
    for p in &paths {
        sized_file(p, shape.member_bytes as u64);
    }
    let members = open_all(&paths);
    let dyns: Vec<Arc<dyn Member>> = members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    write_created(&shape, &dyns, &[]);

    let a = assemble(&members, false);
    let mut model = vec![0u8; a.size_bytes() as usize];
    let mut rng = Rng::new(0x5EC7);
    random_writes(&a, &mut model, &mut rng, 40);
    sector_writes(&a, &mut model, &mut rng, 40, 3);
    assert!(read_all(&a) == model, "healthy read");
    for _ in 0..50 {
        let len = 1 + rng.below(100_000) as usize;
        let off = rng.below((model.len() - len) as u64) as usize;
        let mut got = vec![0u8; len];
        a.read(off as u64, &mut got).unwrap();
        assert!(got == model[off..off + len], "read {len}@{off}");
    }
    a.fail_role(2).unwrap();
    assert!(read_all(&a) == model, "degraded read");
    random_writes(&a, &mut model, &mut rng, 30);
    sector_writes(&a, &mut model, &mut rng, 30, 3);
    assert!(read_all(&a) == model, "degraded write");
    a.close().unwrap();
    drop(a);
    let total: IoStats = members.iter().map(|m| m.io_stats()).sum();
    eprintln!("member I/O paths: {total:?}");
    assert!(total.direct + total.bounced > 0 && total.einval_fallbacks == 0, "{total:?}");
    // Every descriptor goes before the members are opened again: a writable open holds its
    // device exclusively (ownership.rs).
    drop((members, dyns));

    // Reassemble from the survivors, direct again: the failed member is marked faulty.
    let mut survivors = paths.clone();
    survivors.remove(2);
    let again = assemble(&open_all(&survivors), true);
    assert!(read_all(&again) == model, "after reassembly");
}

/// A block device opened for writing is held as the kernel holds md members: a second
/// writable open (another uraid, or a second node of the same disk) is refused while the
/// first lives; a read-only open still works (examine/read of a live array).
#[test]
fn a_block_device_is_held_exclusively_while_written() {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
        uraid_testkit::skip("direct: block device exclusivity", "needs root for losetup");
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let backing = dir.path().join("backing.img");
    sized_file(&backing, 16 << 20);
    let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(&backing).output().expect("losetup (util-linux)");
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    let dev = LoopDevice(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    // A second name for the same device: a symlink (as /dev/disk/by-id/* are).
    let alias = dir.path().join("alias");
    std::os::unix::fs::symlink(&dev.0, &alias).unwrap();
    let first = FileMember::open_with(&dev.0, true, IoMode::Buffered).unwrap();
    for path in [&dev.0, &alias] {
        let err = FileMember::open_with(path, true, IoMode::Buffered).err().expect("a second writer must be refused");
        assert_eq!(err.kind(), std::io::ErrorKind::ResourceBusy, "{err}");
        assert!(err.to_string().contains(&format!("in use by process {}", std::process::id())), "the holder is named: {err}");
    }
    FileMember::open_with(&alias, false, IoMode::Buffered).expect("read-only opens are never blocked");
    drop(first);
    FileMember::open_with(&alias, true, IoMode::Buffered).expect("free again once the holder is gone");
}

/// Buffers are aligned along the whole data path: with page-aligned client buffers and
/// 4 KiB-aligned requests, no member request of a RAID5 or RAID6 over direct members goes
/// through a bounce buffer — client data, stripe buffers read for read-modify-write,
/// parity computed, degraded reads and reconstruct-writes all reach the kernel as they are.
#[test]
fn aligned_requests_reach_direct_members_without_a_bounce() {
    for (level, disks) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let dir = tempfile::tempdir_in("/tmp").unwrap();
        let shape = Shape::new(level, disks);
        let paths: Vec<PathBuf> = (0..disks).map(|i| dir.path().join(format!("d{i}.img"))).collect();
        for p in &paths {
            sized_file(p, shape.member_bytes as u64);
        }
        let members: Vec<Arc<FileMember>> =
            paths.iter().map(|p| Arc::new(FileMember::open_with(p, true, IoMode::Direct).unwrap())).collect();
        let dyns: Vec<Arc<dyn Member>> = members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        write_created(&shape, &dyns, &[]);
        let a = assemble(&members, false);
        let size = a.size_bytes();
        let mut model = vec![0u8; size as usize];
        let mut rng = Rng::new(0xA11E);
        let mut buf = AlignedBuf::zeroed(1 << 20, 4096);
        let stats = || -> IoStats { members.iter().map(|m| m.io_stats()).sum() };
        // Data requests only: superblock writes (the active mark before the first write,
        // the failure's update) are the engine's own small metadata buffers, outside the
        // data path, so each round starts after them.
        let mut round = |a: &Array, model: &mut Vec<u8>, rng: &mut Rng| -> IoStats {
            a.write(0, &buf[..4096]).unwrap();
            model[..4096].copy_from_slice(&buf[..4096]);
            let start = stats();
            for i in 0..120 {
                // 4 KiB to 1 MiB (small read-modify-writes up to full stripes), 4 KiB aligned.
                let len = 4096 * (1 + rng.below(if i % 4 == 0 { 256 } else { 4 })) as usize;
                let off = 4096 * rng.below((size - len as u64) / 4096);
                if rng.below(2) == 0 {
                    rng.fill(&mut buf[..len]);
                    a.write(off, &buf[..len]).unwrap();
                    model[off as usize..off as usize + len].copy_from_slice(&buf[..len]);
                } else {
                    a.read(off, &mut buf[..len]).unwrap();
                    assert!(buf[..len] == model[off as usize..off as usize + len], "{level}: read {len}@{off}");
                }
            }
            let end = stats();
            IoStats { direct: end.direct - start.direct, bounced: end.bounced - start.bounced, ..IoStats::default() }
        };
        let healthy = round(&a, &mut model, &mut rng);
        a.fail_role(1).unwrap();
        let degraded = round(&a, &mut model, &mut rng);
        a.close().unwrap();
        drop(a);
        eprintln!("{level}: healthy {healthy:?}, degraded {degraded:?}");
        for s in [healthy, degraded] {
            assert!(s.direct > 100, "{level}: {s:?}");
            assert_eq!(s.bounced, 0, "{level}: data requests bounced: {s:?}");
        }
    }
}
