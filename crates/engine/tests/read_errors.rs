//! Read errors on a member that still serves (md's fix_read_error): the data is rebuilt from
//! redundancy and returned, written back over the bad range and read back; the member stays
//! until it passes `max_read_errors`. Bad sectors are modelled as disks have them: a read
//! touching one fails until a write covers it (the disk remaps it), unless the sector is
//! marked as one that no write can fix.

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use uraid_core::geometry::Level;
use uraid_engine::array::DeviceState;
use uraid_engine::{Array, ArrayOptions, MemMember, Member};

/// Latent sector errors: byte ranges of the member.
#[derive(Default)]
struct BadSectors {
    /// (start, end, fixed by a write)
    ranges: Mutex<Vec<(u64, u64, bool)>>,
    read_errors: Mutex<u64>,
    /// The device is gone: every read fails with ENODEV.
    gone: std::sync::atomic::AtomicBool,
}

impl BadSectors {
    fn add(&self, start: u64, end: u64, remappable: bool) {
        self.ranges.lock().unwrap().push((start, end, remappable));
    }
    fn left(&self) -> usize {
        self.ranges.lock().unwrap().len()
    }
}

impl Hooks for BadSectors {
    fn before_read(&self, _image: &MemMember, len: usize, offset: u64) -> std::io::Result<()> {
        if self.gone.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::from_raw_os_error(19)); // ENODEV
        }
        let end = offset + len as u64;
        if self.ranges.lock().unwrap().iter().any(|&(s, e, _)| s < end && offset < e) {
            *self.read_errors.lock().unwrap() += 1;
            return Err(std::io::Error::other("medium error (injected)"));
        }
        Ok(())
    }
    fn before_write(&self, _image: &MemMember, buf: &[u8], offset: u64) {
        let end = offset + buf.len() as u64;
        // A write covering a whole bad range remaps it.
        self.ranges.lock().unwrap().retain(|&(s, e, remappable)| !(remappable && offset <= s && e <= end));
    }
}

struct Rig {
    array: Array,
    model: Vec<u8>,
    bad: Vec<Arc<Hooked<BadSectors>>>,
    data_offset: u64,
}

fn rig(shape: &Shape, writable: bool, max_read_errors: u32, seed: u64) -> Rig {
    rig_with(shape, writable, max_read_errors, seed, true)
}

/// `bad_block_log`: false makes the members as md makes them without room for one.
fn rig_with(shape: &Shape, writable: bool, max_read_errors: u32, seed: u64, bad_block_log: bool) -> Rig {
    let made = make(shape);
    if !bad_block_log {
        made.members.iter().for_each(|m| without_bad_block_log(m));
    }
    let bad: Vec<Arc<Hooked<BadSectors>>> = made.members.iter().map(|m| Hooked::new(m.clone(), BadSectors::default())).collect();
    let devs: Vec<Arc<dyn Member>> = bad.iter().map(|b| b.clone() as Arc<dyn Member>).collect();
    let mut opts = ArrayOptions { writable: true, max_read_errors, ..Default::default() };
    let (array, _) = Array::assemble(devs.clone(), &opts).expect("assemble");
    let mut model = read_all(&array);
    random_writes(&array, &mut model, &mut Rng::new(seed), 30);
    array.close().expect("close");
    drop(array);
    opts.writable = writable;
    let (array, _) = Array::assemble(devs, &opts).expect("assemble again");
    let mut sb = vec![0u8; 4096];
    made.members[0].read_at(&mut sb, 4096).unwrap();
    let data_offset = uraid_core::metadata::Superblock1::decode(&sb).unwrap().data_offset_sectors * 512;
    Rig { array, model, bad, data_offset }
}

fn shape(level: Level, disks: usize) -> Shape {
    let mut s = Shape::new(level, disks);
    s.chunk_kib = 16;
    s
}

fn device(a: &Array, label: &str) -> uraid_engine::DeviceInfo {
    a.devices().into_iter().find(|d| d.label == label).unwrap()
}

/// Reads the whole array in 64 KiB requests, as a client would.
fn read_in_requests(a: &Array, model: &[u8]) {
    let mut buf = vec![0u8; 64 << 10];
    for off in (0..model.len()).step_by(buf.len()) {
        let n = buf.len().min(model.len() - off);
        a.read(off as u64, &mut buf[..n]).unwrap_or_else(|e| panic!("read at {off}: {e}"));
        assert!(buf[..n] == model[off..off + n], "read at {off} returned wrong data");
    }
}

#[test]
fn a_latent_error_is_rebuilt_rewritten_and_the_member_stays_on_every_redundant_level() {
    for (level, disks) in
        [(Level::Raid1, 2), (Level::Raid1, 3), (Level::Raid10, 4), (Level::Raid4, 4), (Level::Raid5, 4), (Level::Raid6, 5)]
    {
        let r = rig(&shape(level, disks), true, 20, 11);
        // Mirrors read the first copy: the bad ranges go where reads go.
        let (b, label) = if matches!(level, Level::Raid1 | Level::Raid10) { (0, "m0") } else { (1, "m1") };
        // Five bad 4 KiB ranges spread over the member's data.
        let span = r.bad[b].size_bytes() - r.data_offset;
        for i in 0..5u64 {
            let at = r.data_offset + (span / 5 * i + 8192) / 4096 * 4096;
            r.bad[b].add(at, at + 4096, true);
        }
        read_in_requests(&r.array, &r.model);
        let m = device(&r.array, label);
        assert!(matches!(m.state, DeviceState::InSync(_)), "{level:?}×{disks}: {label} is {:?} ({:?})", m.state, m.failure);
        assert!(m.read_errors > 0 && m.read_errors_corrected > 0, "{level:?}: {m:?}");
        assert_eq!(m.read_errors_corrected, m.read_errors, "{level:?}: every error was corrected");
        if matches!(level, Level::Raid1 | Level::Raid10) {
            // Parity levels never read a parity block for a client; mirrors read it all.
            assert_eq!(r.bad[b].left(), 0, "{level:?}: every bad range was rewritten");
        }
        // A request counts once per member, though its retry piece by piece meets the bad
        // range again.
        assert!(m.read_errors <= *r.bad[b].read_errors.lock().unwrap(), "{level:?}: {m:?}");
        // Nothing left to correct: a second pass sees no error, and the array checks clean.
        let seen = m.read_errors;
        read_in_requests(&r.array, &r.model);
        assert_eq!(device(&r.array, label).read_errors, seen, "{level:?}");
        assert_eq!(check_clean(&r.array).mismatch_sectors, 0, "{level:?}");
    }
}

#[test]
fn raid1_heals_a_copy_that_failed_while_another_served() {
    // RAID1 reads the first copy; make it the bad one.
    let r = rig(&shape(Level::Raid1, 2), true, 20, 12);
    let at = r.data_offset + 64 * 1024;
    r.bad[0].add(at, at + 8192, true);
    read_in_requests(&r.array, &r.model);
    let m0 = device(&r.array, "m0");
    assert_eq!(m0.state, DeviceState::InSync(0), "{m0:?}");
    assert!(m0.read_errors_corrected >= 1 && r.bad[0].left() == 0, "{m0:?}");
}

#[test]
fn a_member_past_max_read_errors_is_failed_and_the_data_still_reads() {
    let r = rig(&shape(Level::Raid5, 4), true, 3, 13);
    // Six bad ranges in six different requests: the fourth error fails m2.
    for i in 0..6u64 {
        let at = r.data_offset + i * (256 << 10);
        r.bad[2].add(at, at + 4096, true);
    }
    read_in_requests(&r.array, &r.model);
    let m2 = device(&r.array, "m2");
    assert_eq!(m2.state, DeviceState::Faulty, "{m2:?}");
    assert_eq!((m2.read_errors, m2.read_errors_corrected), (4, 3), "{m2:?}");
    assert!(m2.failure.as_deref().unwrap_or("").contains("max_read_errors"), "{m2:?}");
}

#[test]
fn a_sector_that_stays_bad_after_the_rewrite_is_listed_or_fails_the_member() {
    for log in [false, true] {
        let r = rig_with(&shape(Level::Raid6, 5), true, 20, 14, log);
        let at = r.data_offset + (128 << 10);
        r.bad[3].add(at, at + 512, false);
        read_in_requests(&r.array, &r.model);
        let m3 = device(&r.array, "m3");
        if log {
            // md's fix_read_error with a bad-block log: the range is listed, the member stays.
            assert_eq!(m3.state, DeviceState::InSync(3), "{m3:?}");
            assert!(m3.bad_blocks.iter().any(|b| b.start * 512 <= at && at < b.end() * 512), "{m3:?}");
            read_in_requests(&r.array, &r.model);
        } else {
            assert_eq!(m3.state, DeviceState::Faulty, "{m3:?}");
            assert_eq!(m3.read_errors_corrected, 0);
        }
    }
}

#[test]
fn degraded_raid6_still_heals_and_degraded_raid5_cannot() {
    // RAID6 missing m0: m1's bad range is rebuilt from the other three.
    let r = rig(&shape(Level::Raid6, 5), true, 20, 15);
    r.array.fail_device_by_label("m0").unwrap();
    let at = r.data_offset + (96 << 10);
    r.bad[1].add(at, at + 4096, true);
    read_in_requests(&r.array, &r.model);
    let m1 = device(&r.array, "m1");
    assert_eq!(m1.state, DeviceState::InSync(1), "{m1:?}");
    assert_eq!(m1.read_errors_corrected, 1);

    // RAID5 missing m0: nothing is left to rebuild m1's bad range from; the data there is
    // reported lost, never made up. Without a bad-block log md fails the member; with one
    // it keeps it (only those stripes are lost).
    for log in [false, true] {
        let r = rig_with(&shape(Level::Raid5, 4), true, 20, 16, log);
        r.array.fail_device_by_label("m0").unwrap();
        let at = r.data_offset + (96 << 10);
        r.bad[1].add(at, at + 4096, true);
        let mut buf = vec![0u8; r.model.len()];
        assert!(r.array.read(0, &mut buf).is_err(), "a read of lost data must fail");
        let expect = if log { DeviceState::InSync(1) } else { DeviceState::Faulty };
        assert_eq!(device(&r.array, "m1").state, expect, "log {log}");
    }
}

#[test]
fn a_read_only_array_returns_rebuilt_data_and_leaves_the_member_alone() {
    let r = rig(&shape(Level::Raid5, 4), false, 20, 17);
    let at = r.data_offset + (32 << 10);
    r.bad[0].add(at, at + 4096, true);
    read_in_requests(&r.array, &r.model);
    let m0 = device(&r.array, "m0");
    assert_eq!(m0.state, DeviceState::InSync(0));
    assert_eq!((m0.read_errors_corrected, r.bad[0].left()), (0, 1), "nothing was written");
}

#[test]
fn a_check_rewrites_latent_errors_that_no_client_read_reaches() {
    for (level, disks) in [(Level::Raid1, 2), (Level::Raid10, 4), (Level::Raid5, 4), (Level::Raid6, 5)] {
        let r = rig(&shape(level, disks), true, 20, 18);
        // Bad ranges every 160 KiB over the last member: on parity levels some fall in
        // parity blocks and on mirrors on the copy reads skip, which only a scrub reads.
        let last = disks - 1;
        let span = r.bad[last].size_bytes() - r.data_offset;
        let mut at = r.data_offset + 4096;
        let mut n = 0;
        while at + 4096 < r.data_offset + span && n < 12 {
            r.bad[last].add(at, at + 4096, true);
            at += 160 << 10;
            n += 1;
        }
        let report = check_clean(&r.array);
        let m = device(&r.array, &format!("m{last}"));
        assert!(matches!(m.state, DeviceState::InSync(_)), "{level:?}: {m:?}");
        assert_eq!(r.bad[last].left(), 0, "{level:?}: the scrub rewrote every bad range");
        assert_eq!(report.mismatch_sectors, 0, "{level:?}");
        assert!(report.read_errors_corrected >= n, "{level:?}: {report:?}");
        assert_eq!(m.read_errors_corrected, report.read_errors_corrected, "{level:?}");
        read_in_requests(&r.array, &r.model);
    }
}

#[test]
fn a_device_that_is_gone_is_failed_at_once_not_rewritten() {
    let r = rig(&shape(Level::Raid5, 4), true, 20, 19);
    r.bad[2].gone.store(true, std::sync::atomic::Ordering::SeqCst);
    read_in_requests(&r.array, &r.model);
    let m2 = device(&r.array, "m2");
    assert_eq!(m2.state, DeviceState::Faulty, "{m2:?}");
    assert_eq!((m2.read_errors, m2.read_errors_corrected), (0, 0), "not counted as a bad sector: {m2:?}");
}

/// Rebuilds a missing member onto a new spare, step by step.
fn rebuild_onto_spare(a: &Array, bytes: usize) -> Arc<MemMember> {
    let spare = Arc::new(MemMember::zeroed("spare", bytes));
    a.add_device(spare.clone(), [0x77; 16]).expect("add spare");
    loop {
        let p = a.recovery_step(1 << 20).expect("recovery step");
        if p.finished() {
            break;
        }
    }
    spare
}

#[test]
fn mirror_and_parity_rebuilds_heal_latent_errors_on_the_members_they_read() {
    // RAID10 near=3 over 3 members: every member holds every chunk, as a 3-way RAID1.
    for (level, disks, layout) in [(Level::Raid1, 3, None), (Level::Raid10, 3, Some(0x103)), (Level::Raid6, 5, None)] {
        let mut s = shape(level, disks);
        if let Some(l) = layout {
            s = s.layout(l);
        }
        let r = rig(&s, true, 20, 19);
        // The last member is rebuilt; m0, read by the rebuild, has the bad ranges.
        r.array.fail_device_by_label(&format!("m{}", disks - 1)).unwrap();
        let span = r.bad[0].size_bytes() - r.data_offset;
        for i in 0..4u64 {
            let at = r.data_offset + (span / 4 * i + 4096) / 4096 * 4096;
            r.bad[0].add(at, at + 4096, true);
        }
        rebuild_onto_spare(&r.array, r.bad[0].size_bytes() as usize);
        let m0 = device(&r.array, "m0");
        assert_eq!(m0.state, DeviceState::InSync(0), "{level:?}: {m0:?}");
        assert!(m0.read_errors_corrected > 0, "{level:?}: the rebuild read through the bad ranges: {m0:?}");
        assert!(r.array.missing_roles().is_empty(), "{level:?}: rebuilt");
        read_in_requests(&r.array, &r.model);
        // The rebuilt member is right: with m0 gone now, everything still reads.
        r.array.fail_device_by_label("m0").unwrap();
        read_in_requests(&r.array, &r.model);
    }
}

#[test]
fn a_rebuild_with_nothing_left_to_rebuild_a_range_from_lists_it_on_the_new_member_and_goes_on() {
    // A degraded RAID5 and a 2-way mirror: m0's bad ranges have no other copy. md (with a
    // bad-block log) lists them on the member being rebuilt and finishes the rebuild.
    for (level, disks) in [(Level::Raid5, 4), (Level::Raid1, 2)] {
        let r = rig(&shape(level, disks), true, 20, 23);
        r.array.fail_device_by_label(&format!("m{}", disks - 1)).unwrap();
        let bad_at = r.data_offset + (256 << 10);
        r.bad[0].add(bad_at, bad_at + 4096, false);
        rebuild_onto_spare(&r.array, r.bad[0].size_bytes() as usize);
        assert!(r.array.missing_roles().is_empty(), "{level:?}: the rebuild finished");
        let spare = device(&r.array, "spare");
        assert!(matches!(spare.state, DeviceState::InSync(_)), "{level:?}: {spare:?}");
        let listed = uraid_core::metadata::SectorRange { start: bad_at / 512, sectors: 8 };
        assert_eq!(spare.bad_blocks, vec![listed], "{level:?}: exactly the 4 KiB the rebuild could not produce");
        assert!(matches!(device(&r.array, "m0").state, DeviceState::InSync(_)), "{level:?}");
        // Everything else reads right; the lost row reads as an error, never as made-up data.
        let mut buf = vec![0u8; 4096];
        let mut lost = 0;
        for off in (0..r.model.len()).step_by(4096) {
            match r.array.read(off as u64, &mut buf) {
                Ok(()) => assert!(buf[..] == r.model[off..off + 4096], "{level:?}: wrong data at {off}"),
                Err(_) => lost += 1,
            }
        }
        assert!((1..=3).contains(&lost), "{level:?}: {lost} 4 KiB blocks unreadable");
    }
}

/// A member whose superblock cannot be read (a dying disk, I/O errors) is missing, as
/// mdadm skips a device it cannot read: the rest assembles degraded with the content. A
/// readable device without a superblock is still refused (the wrong device was given).
#[test]
fn a_member_that_cannot_be_read_is_left_out_at_assembly() {
    let r = rig(&shape(Level::Raid5, 4), true, 20, 7);
    let model = r.model.clone();
    drop(r.array);
    r.bad[2].hooks.gone.store(true, std::sync::atomic::Ordering::SeqCst);
    let devs: Vec<Arc<dyn Member>> = r.bad.iter().map(|b| b.clone() as Arc<dyn Member>).collect();
    let mut opts = ArrayOptions { writable: true, ..Default::default() };
    // Missing, it is one more active member not given: md's rule for those holds (--run).
    assert!(matches!(Array::assemble(devs.clone(), &opts), Err(uraid_engine::EngineError::Refused(_))));
    opts.assemble.run = true;
    let (array, report) = Array::assemble(devs.clone(), &opts).expect("assembles without the unreadable member");
    assert_eq!(report.degraded_roles, vec![2], "{report:?}");
    assert!(report.warnings.iter().any(|w| w.contains("cannot be read")), "{report:?}");
    assert_eq!(read_all(&array), model);
    drop(array);
    let blank: Arc<dyn Member> = Arc::new(MemMember::zeroed("blank", 4 << 20));
    let mut with_blank = devs;
    with_blank[2] = blank;
    assert!(Array::assemble(with_blank, &opts).is_err(), "a device with no superblock is refused");
}

/// A read error met where parity may be stale (an unclean shutdown, before its resync)
/// rewrites only the 4 KiB piece that fails, as md rebuilds only the failing page: the
/// rebuilt copy of the rest of the block would come from the stale parity too, and writing
/// it would destroy sectors that read fine. Shown to fail before (serial simulator seed
/// 3653: the whole 32 KiB read was rewritten from stale parity).
#[test]
fn a_read_error_under_stale_parity_rewrites_only_the_failing_piece() {
    let r = rig(&shape(Level::Raid5, 4), true, 20, 9);
    // Stripe 0 of a left-symmetric RAID5: data chunks on roles 0..2, parity on role 3.
    // Its parity goes stale (as a crash between data and parity writes leaves it).
    let chunk = 16 * 1024u64;
    r.bad[3].image.write_at(&Rng::new(3).bytes(chunk as usize), r.data_offset).unwrap();
    // The last 4 KiB of role 0's chunk cannot be read.
    r.bad[0].hooks.add(r.data_offset + chunk - 4096, r.data_offset + chunk, true);
    let mut report = uraid_engine::array::CheckReport::default();
    r.array.check_step(0, 1024, false, &mut report).expect("check");
    let mut got = vec![0u8; chunk as usize];
    r.array.read(0, &mut got).unwrap();
    let good = (chunk - 4096) as usize;
    assert!(got[..good] == r.model[..good], "sectors that read fine were rewritten from stale parity");
    assert_eq!(r.bad[0].hooks.left(), 0, "the failing piece was rewritten");
}
