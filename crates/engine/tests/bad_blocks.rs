//! md's bad-block log (`engine::bad_blocks`, `array/bad_ranges.rs`): listed ranges are never
//! read (their contents are rebuilt from redundancy), a failed write is listed instead of
//! failing the member when the member has a log with room, the list is written with the
//! superblocks in md's format and read back at assembly, and a later successful write
//! clears it.

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use uraid_core::geometry::Level;
use uraid_core::metadata::{BadBlockList, FeatureMap, SectorRange, Superblock1};
use uraid_engine::array::DeviceState;
use uraid_engine::{Array, ArrayOptions, MemMember, Member};

/// v1.2 superblock location on test members.
const SB_OFFSET: u64 = 4096;

fn superblock(m: &MemMember) -> Superblock1 {
    let mut sb = vec![0u8; 4096];
    m.read_at(&mut sb, SB_OFFSET).unwrap();
    Superblock1::decode(&sb).unwrap()
}

fn data_offset_sectors(m: &MemMember) -> u64 {
    superblock(m).data_offset_sectors
}

/// The member's list as its superblock and log on disk say (None: BAD_BLOCKS not set).
fn on_disk_list(m: &MemMember) -> Option<BadBlockList> {
    let sb = superblock(m);
    if !sb.feature_map.contains(FeatureMap::BAD_BLOCKS) {
        return None;
    }
    let at = (SB_OFFSET as i64 + i64::from(sb.bblog_offset_sectors) * 512) as u64;
    let mut log = vec![0u8; usize::from(sb.bblog_size_sectors) * 512];
    m.read_at(&mut log, at).unwrap();
    Some(BadBlockList::decode(&log, sb.bblog_shift).unwrap())
}

/// Writes fail with EIO (and reads fail) where a range is marked: sectors no write can fix.
#[derive(Default)]
struct Unwritable {
    ranges: Mutex<Vec<(u64, u64)>>,
    write_errors: Mutex<u64>,
}

impl Unwritable {
    fn hit(&self, offset: u64, len: usize) -> bool {
        let end = offset + len as u64;
        self.ranges.lock().unwrap().iter().any(|&(s, e)| s < end && offset < e)
    }
}

impl Hooks for Unwritable {
    fn before_read(&self, _image: &MemMember, len: usize, offset: u64) -> std::io::Result<()> {
        if self.hit(offset, len) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
    fn fail_write(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        if self.hit(offset, buf.len()) {
            *self.write_errors.lock().unwrap() += 1;
            return Err(std::io::Error::from_raw_os_error(5));
        }
        Ok(())
    }
}

fn shape(level: Level, disks: usize) -> Shape {
    let mut s = Shape::new(level, disks);
    s.chunk_kib = 16;
    s
}

fn assemble(devs: &[Arc<dyn Member>]) -> Array {
    let opts = ArrayOptions { writable: true, ..Default::default() };
    Array::assemble(devs.to_vec(), &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"))
}

fn device(a: &Array, label: &str) -> uraid_engine::DeviceInfo {
    a.devices().into_iter().find(|d| d.label == label).unwrap()
}

const LEVELS: [(Level, usize); 5] = [(Level::Raid1, 2), (Level::Raid10, 4), (Level::Raid4, 4), (Level::Raid5, 4), (Level::Raid6, 5)];

#[test]
fn listed_ranges_are_never_read_and_the_list_survives_a_restart() {
    for (level, disks) in LEVELS {
        let made = make(&shape(level, disks));
        let devs: Vec<Arc<dyn Member>> = made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
        let a = assemble(&devs);
        let mut model = read_all(&a);
        random_writes(&a, &mut model, &mut Rng::new(7), 40);
        // List two ranges on member 0 (mirrors read it first), then put garbage there.
        let base = data_offset_sectors(&made.members[0]);
        let listed = [SectorRange { start: base + 40, sectors: 24 }, SectorRange { start: base + 3000, sectors: 700 }];
        for r in listed {
            a.add_bad_blocks("m0", r.start, r.sectors).unwrap_or_else(|e| panic!("{level:?}: {e}"));
            made.members[0].write_at(&vec![0xa5; (r.sectors * 512) as usize], r.start * 512).unwrap();
            // Every superblock written is valid, the first with BAD_BLOCKS set included.
            let sb = superblock(&made.members[0]);
            assert_eq!(sb.compute_checksum(), sb.sb_csum, "{level:?}: superblock written with a stale checksum");
        }
        assert_eq!(device(&a, "m0").bad_blocks, listed.to_vec());
        // On disk at once (recording writes the superblocks), in md's format, under a
        // superblock whose checksum covers the BAD_BLOCKS bit.
        assert_eq!(on_disk_list(&made.members[0]).map(|l| l.ranges().to_vec()), Some(listed.to_vec()), "{level:?}");
        a.close().unwrap();
        drop(a);

        let a = assemble(&devs);
        assert_eq!(device(&a, "m0").bad_blocks, listed.to_vec(), "{level:?}: loaded at assembly");
        assert!(read_all(&a) == model, "{level:?}: data came from a listed range");
        let m0 = device(&a, "m0");
        assert!(matches!(m0.state, DeviceState::InSync(_)));
        assert_eq!(m0.read_errors, 0, "{level:?}: a listed range is no new read error");
        // Reads rebuilt the ranges and wrote them back; this disk took the writes, so they
        // are no longer listed (mirrors read only the first copy: both ranges are on it;
        // parity levels read only data blocks, so a range in a parity block may stay).
        if matches!(level, Level::Raid1 | Level::Raid10) {
            assert!(m0.bad_blocks.is_empty(), "{level:?}: {:?}", m0.bad_blocks);
        }
        // Writing the whole array clears the list; the next superblock update drops the bit.
        let fresh = Rng::new(8).bytes(model.len());
        a.write(0, &fresh).unwrap();
        assert!(device(&a, "m0").bad_blocks.is_empty(), "{level:?}: {:?}", device(&a, "m0").bad_blocks);
        a.close().unwrap();
        drop(a);
        assert_eq!(on_disk_list(&made.members[0]), None, "{level:?}: BAD_BLOCKS still set");
        let a = assemble(&devs);
        assert!(read_all(&a) == fresh, "{level:?}");
    }
}

#[test]
fn a_failed_write_is_listed_and_the_member_stays() {
    for (level, disks) in LEVELS {
        let made = make(&shape(level, disks));
        let hooked: Vec<Arc<Hooked<Unwritable>>> = made.members.iter().map(|m| Hooked::new(m.clone(), Unwritable::default())).collect();
        let devs: Vec<Arc<dyn Member>> = hooked.iter().map(|h| h.clone() as Arc<dyn Member>).collect();
        let a = assemble(&devs);
        let mut model = read_all(&a);
        // Member 1 cannot write 12 KiB somewhere in its data area.
        let base = data_offset_sectors(&made.members[1]) * 512;
        let (bad_lo, bad_hi) = (base + 200 * 1024, base + 212 * 1024);
        hooked[1].ranges.lock().unwrap().push((bad_lo, bad_hi));
        random_writes(&a, &mut model, &mut Rng::new(21), 60);
        // Whole-array writes certainly cover the range.
        let whole = Rng::new(22).bytes(model.len());
        a.write(0, &whole).unwrap_or_else(|e| panic!("{level:?}: {e}"));
        model.copy_from_slice(&whole);
        let m1 = device(&a, "m1");
        assert!(matches!(m1.state, DeviceState::InSync(_)), "{level:?}: m1 is {:?} ({:?})", m1.state, m1.failure);
        assert!(*hooked[1].write_errors.lock().unwrap() > 0, "{level:?}: the range was never written");
        // Narrowed to the 4 KiB pieces that failed: exactly the unwritable range.
        assert_eq!(m1.bad_blocks, vec![SectorRange { start: bad_lo / 512, sectors: (bad_hi - bad_lo) / 512 }], "{level:?}");
        assert!(read_all(&a) == model, "{level:?}: data lost");
        a.close().unwrap();
        drop(a);
        // A restart with the disk still bad: the list is loaded, reads rebuild around it,
        // and a scrub finds the redundancy consistent.
        let a = assemble(&devs);
        assert!(read_all(&a) == model, "{level:?}: data lost after a restart");
        let report = check_clean(&a);
        assert_eq!(report.mismatch_sectors, 0, "{level:?}: {report:?}");
        // The disk remaps the sectors; the next write there clears the list.
        hooked[1].ranges.lock().unwrap().clear();
        a.write(0, &model).unwrap();
        assert!(device(&a, "m1").bad_blocks.is_empty(), "{level:?}");
    }
}

#[test]
fn without_a_log_or_with_a_full_one_a_failed_write_fails_the_member() {
    for no_log in [true, false] {
        let made = make(&shape(Level::Raid5, 4));
        if no_log {
            // As a member made without room for a log (or with 0.90 metadata).
            for m in &made.members {
                without_bad_block_log(m);
            }
        }
        let hooked: Vec<Arc<Hooked<Unwritable>>> = made.members.iter().map(|m| Hooked::new(m.clone(), Unwritable::default())).collect();
        let devs: Vec<Arc<dyn Member>> = hooked.iter().map(|h| h.clone() as Arc<dyn Member>).collect();
        let a = assemble(&devs);
        // Read first: a read rebuilds listed ranges and writes them back, which clears them.
        let mut model = read_all(&a);
        let base = data_offset_sectors(&made.members[1]);
        if !no_log {
            // md's log holds 512 entries: fill it with ranges md cannot merge, far from
            // where the write below goes (a write there would clear them).
            for i in 0..512 {
                a.add_bad_blocks("m1", base + 4000 + 2 * i, 1).unwrap();
            }
            assert!(a.add_bad_blocks("m1", base + 3000, 1).is_err(), "a 513th entry fits nowhere");
        }
        hooked[1].ranges.lock().unwrap().push((base * 512 + 64 * 1024, base * 512 + 68 * 1024));
        // Array bytes 0..1 MiB: member sectors 0..~680 on every member (16 KiB chunks, 3 data).
        let head = Rng::new(5).bytes(1 << 20);
        a.write(0, &head).unwrap();
        model[..head.len()].copy_from_slice(&head);
        let m1 = device(&a, "m1");
        assert_eq!(
            m1.state,
            DeviceState::Faulty,
            "no_log {no_log}: {} listed, {} write errors",
            m1.bad_blocks.len(),
            hooked[1].write_errors.lock().unwrap()
        );
        assert!(read_all(&a) == model);
    }
}

#[test]
fn two_listed_members_in_one_raid5_stripe_lose_that_stripe_not_the_members() {
    let made = make(&shape(Level::Raid5, 4));
    let devs: Vec<Arc<dyn Member>> = made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let a = assemble(&devs);
    let mut model = read_all(&a);
    random_writes(&a, &mut model, &mut Rng::new(3), 20);
    // Member sectors 64..72 (the 3rd stripe of 16 KiB chunks begins at member sector 64)
    // on two members: that stripe's 8-sector row cannot be rebuilt.
    for label in ["m1", "m2"] {
        let base = data_offset_sectors(&made.members[label[1..].parse::<usize>().unwrap()]);
        a.add_bad_blocks(label, base + 64, 8).unwrap();
    }
    // Stripe 2 holds array bytes 2*48K..3*48K; somewhere in it reads must fail, and only there.
    let stripe = 48 * 1024u64;
    let mut failed = 0;
    for off in (0..model.len() as u64).step_by(4096) {
        let mut buf = vec![0u8; 4096];
        match a.read(off, &mut buf) {
            Ok(()) => assert!(buf[..] == model[off as usize..off as usize + 4096], "wrong data at {off}"),
            Err(_) => {
                assert!((2 * stripe..3 * stripe).contains(&off), "read at {off} failed outside the stripe");
                failed += 1;
            }
        }
    }
    assert!(failed > 0, "the doubly listed row was read");
    for label in ["m1", "m2"] {
        assert!(matches!(device(&a, label).state, DeviceState::InSync(_)), "{label}: {:?}", device(&a, label));
    }
}
