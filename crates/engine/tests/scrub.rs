//! Check and repair report where they found something, which member, and what they did;
//! a mirror with three or more copies repairs by majority (md keeps its first copy and
//! copies it over the rest, so one bad first copy would overwrite two good ones).

mod common;
use common::*;
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_engine::array::{ScrubAction, ScrubFinding};
use uraid_engine::{Array, MemMember, Member};

fn data_offset(m: &MemMember) -> u64 {
    let mut raw = vec![0u8; 4096];
    m.read_at(&mut raw, 4096).unwrap();
    uraid_core::metadata::Superblock1::decode(&raw).unwrap().data_offset_sectors * 512
}

fn filled(level: Level, disks: usize, seed: u64) -> (Made, Array, Vec<u8>) {
    let mut shape = Shape::new(level, disks);
    shape.chunk_kib = 16;
    let made = make(&shape);
    let a = open(&made.members, false);
    let mut model = read_all(&a);
    let fresh = Rng::new(seed).bytes(model.len());
    a.write(0, &fresh).unwrap();
    model.copy_from_slice(&fresh);
    (made, a, model)
}

#[test]
fn a_three_way_mirror_repair_takes_the_majority_and_says_where() {
    let (made, a, model) = filled(Level::Raid1, 3, 1);
    // Member 0's copy (the one md would keep) goes wrong at array byte 1 MiB + 8 KiB.
    let at = (1 << 20) + 8192u64;
    made.members[0].write_at(&[0x5a; 4096], data_offset(&made.members[0]) + at).unwrap();

    let found = scrub(&a, false);
    assert_eq!(found.mismatch_sectors, 8, "one copy, one 4 KiB row: {found:?}");
    assert_eq!(found.findings, vec![ScrubFinding { array_sector: at / 512, sectors: 8, role: Some(0), action: ScrubAction::Mismatch }]);

    let repaired = scrub(&a, true);
    assert_eq!(
        repaired.findings,
        vec![ScrubFinding { array_sector: at / 512, sectors: 8, role: Some(0), action: ScrubAction::CopyRewritten }]
    );
    // Every copy holds the majority's bytes now (reads go to copy 0 first).
    assert!(read_all(&a) == model, "the outvoted copy was copied over the good ones");
    for m in &made.members {
        let mut b = vec![0u8; 4096];
        m.read_at(&mut b, data_offset(m) + at).unwrap();
        assert!(b[..] == model[at as usize..at as usize + 4096]);
    }
    assert_eq!(scrub(&a, false).mismatch_sectors, 0);
}

#[test]
fn a_two_way_mirror_keeps_its_first_copy_as_md_does() {
    let (made, a, _) = filled(Level::Raid1, 2, 2);
    let at = 64 << 10;
    made.members[1].write_at(&[0x11; 4096], data_offset(&made.members[1]) + at).unwrap();
    let repaired = scrub(&a, true);
    assert_eq!(repaired.findings.len(), 1);
    assert_eq!(repaired.findings[0].role, Some(1), "the second copy is the one rewritten: {repaired:?}");
}

#[test]
fn parity_findings_name_the_row_and_on_raid6_the_member() {
    // 4 data blocks of 16 KiB per RAID6 stripe (6 members); corrupt member 2 in stripe 3.
    let (made, a, _) = filled(Level::Raid6, 6, 3);
    let stripe = 3u64;
    let member_sector = stripe * 32 + 8; // second 4 KiB row of that stripe's chunk
    made.members[2].write_at(&[0xee; 4096], data_offset(&made.members[2]) + member_sector * 512).unwrap();
    let found = scrub(&a, false);
    assert_eq!(found.findings.len(), 1, "{found:?}");
    let f = &found.findings[0];
    // The row's first data block: stripe 3 starts at array sector 3 * 4 * 32.
    assert_eq!((f.array_sector, f.sectors, f.role, f.action), (stripe * 128 + 8, 8, Some(2), ScrubAction::Mismatch));

    // RAID5 cannot say which block is wrong; repair rewrites parity there.
    let (made, a, _) = filled(Level::Raid5, 4, 4);
    made.members[0].write_at(&[0xee; 4096], data_offset(&made.members[0]) + (5 * 32 + 16) * 512).unwrap();
    let repaired = scrub(&a, true);
    assert_eq!(repaired.findings.len(), 1, "{repaired:?}");
    let f = &repaired.findings[0];
    assert_eq!((f.array_sector, f.role, f.action), (5 * 96 + 16, None, ScrubAction::ParityRewritten));
}

#[test]
fn a_scrub_names_the_member_whose_read_failed() {
    struct FailOnce(std::sync::atomic::AtomicBool, u64);
    impl Hooks for FailOnce {
        fn before_read(&self, _image: &MemMember, len: usize, offset: u64) -> std::io::Result<()> {
            if offset <= self.1 && self.1 < offset + len as u64 && self.0.swap(false, std::sync::atomic::Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            Ok(())
        }
    }
    let mut shape = Shape::new(Level::Raid5, 4);
    shape.chunk_kib = 16;
    let made = make(&shape);
    let bad_at = data_offset(&made.members[3]) + 200 * 512;
    let hooked: Vec<Arc<dyn Member>> = made
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| Hooked::new(m.clone(), FailOnce(std::sync::atomic::AtomicBool::new(i == 3), bad_at)) as Arc<dyn Member>)
        .collect();
    let opts = uraid_engine::ArrayOptions { writable: true, ..Default::default() };
    let (a, _) = Array::assemble(hooked, &opts).unwrap();
    let report = scrub(&a, false);
    assert_eq!(report.read_errors_corrected, 1);
    let f: Vec<_> = report.findings.iter().filter(|f| f.action == ScrubAction::ReadErrorRewritten).collect();
    assert_eq!(f.len(), 1, "{report:?}");
    assert_eq!(f[0].role, Some(3));
}

/// md counts a RAID10 resync in array sectors (`recovery_cp`), uraid's resync walks member
/// rows. An array md stopped part-way through its resync (here: at array sector `a`, every
/// chunk from there on with one copy stale) must come out with every copy equal: taking
/// md's number as a member row skipped array sectors md had not done (n2 of 3 members
/// holds a row's worth of array sectors 1.5 times further on). And uraid's own number
/// goes out in array sectors: assembled again before its resync ran, nothing is skipped.
#[test]
fn a_raid10_resync_md_left_part_way_is_finished_from_where_md_stopped() {
    use uraid_core::metadata::Superblock1;
    for (layout, disks) in [(0x102u32, 3usize), (0x102, 4), (0x201, 3), (0x10201, 3)] {
        let mut shape = Shape::new(Level::Raid10, disks);
        shape.chunk_kib = 16;
        shape.layout = Some(layout);
        let made = make(&shape);
        {
            let a = open(&made.members, false);
            a.write(0, &Rng::new(7).bytes(a.size_bytes() as usize)).unwrap();
            a.close().unwrap();
        }
        let sb0 = {
            let mut raw = vec![0u8; 4096];
            made.members[0].read_at(&mut raw, 4096).unwrap();
            Superblock1::decode(&raw).unwrap()
        };
        let g = uraid_core::geometry::Raid10Geometry::new(layout, sb0.chunksize_sectors, disks, sb0.size_sectors).unwrap();
        let chunk = g.chunk_sectors();
        // md stopped a quarter of the way (a whole chunk); past it, the last copy of every
        // chunk is stale (a crash between the copies' writes).
        let stopped = g.array_sectors() / 4 / chunk * chunk;
        for c in (stopped / chunk)..(g.array_sectors() / chunk) {
            let last = *g.copies(c * chunk).unwrap().last().unwrap();
            let m = &made.members[last.role];
            m.write_at(&vec![0xa5; (chunk * 512) as usize], data_offset(m) + last.sector * 512).unwrap();
        }
        for m in &made.members {
            let mut raw = vec![0u8; 4096];
            m.read_at(&mut raw, 4096).unwrap();
            let mut sb = Superblock1::decode(&raw).unwrap();
            sb.resync_offset_sectors = stopped;
            sb.update_checksum();
            m.write_at(&sb.encode(), 4096).unwrap();
        }
        // Assembled and closed before any resync: the offset uraid writes back must still
        // name a point at or before md's.
        {
            let a = open(&made.members, false);
            a.close().unwrap();
        }
        let mut raw = vec![0u8; 4096];
        made.members[1].read_at(&mut raw, 4096).unwrap();
        let written = Superblock1::decode(&raw).unwrap().resync_offset_sectors;
        assert!(written <= stopped, "{layout:#x}/{disks}: uraid recorded {written}, md had stopped at {stopped}");
        let a = open(&made.members, false);
        let outcome = driver(&a).run(uraid_engine::array::JobKind::Resync, &|| false, |_| {}).expect("resync");
        assert!(outcome.finished, "{outcome:?}");
        let report = check_clean(&a);
        assert_eq!(
            report.mismatch_sectors,
            0,
            "{layout:#x}/{disks}: copies still differ after the resync, first at {:?}",
            report.findings.first()
        );
    }
}
