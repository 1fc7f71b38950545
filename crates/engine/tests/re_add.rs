//! md's bitmap-based re-add: a former member taken back with `re_add_device` gets its old
//! role and only the regions written while it was gone (their bitmap chunks dirty) are
//! rebuilt onto it; the bits survive clean marks while the array is degraded; a member that
//! left before the bits were last cleared is rebuilt in full.

mod common;
use common::*;
use std::sync::{Arc, Mutex};
use uraid_core::geometry::Level;
use uraid_core::metadata::{BitmapSuperblock, DeviceRole, Superblock, WriteIntentBits};
use uraid_engine::array::{JobKind, ReAdd};
use uraid_engine::{Array, ArrayOptions, DeviceState, MemMember, Member};

/// Bitmap chunk: 1 MiB of member sectors, the size of one recovery region with one lane, so
/// a rebuilt region is exactly one chunk.
const BITMAP_CHUNK: u32 = 1 << 20;

/// A member that records every write's (offset, length).
struct Counting {
    writes: Mutex<Vec<(u64, u64)>>,
}

impl Counting {
    fn new(image: Arc<MemMember>) -> Arc<Hooked<Counting>> {
        Hooked::new(image, Counting { writes: Mutex::new(Vec::new()) })
    }
    fn take_writes(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
}

impl Hooks for Counting {
    fn before_write(&self, _image: &MemMember, buf: &[u8], offset: u64) {
        self.writes.lock().unwrap().push((offset, buf.len() as u64));
    }
}

fn superblock(m: &dyn Member) -> (u64, Superblock) {
    let probe = uraid_engine::scan::probe(m);
    let (loc, sb) = probe.best().cloned().expect("a superblock");
    (loc.offset_bytes, sb)
}

/// The bitmap superblock and bits on member `m`.
fn disk_bitmap(m: &dyn Member) -> (BitmapSuperblock, WriteIntentBits) {
    let (at, sb) = superblock(m);
    let at = sb.bitmap_offset_bytes(at).expect("a bitmap");
    let mut head = vec![0u8; 256];
    m.read_at(&mut head, at).unwrap();
    let bsb = BitmapSuperblock::decode(&head).unwrap();
    let mut bits = vec![0u8; bsb.bits_len_bytes() as usize];
    m.read_at(&mut bits, at + 256).unwrap();
    let bits = WriteIntentBits::decode(&bsb, &bits).unwrap();
    (bsb, bits)
}

fn assemble(devs: Vec<Arc<dyn Member>>) -> Array {
    // One recovery lane: regions are whole 2048-sector units, one bitmap chunk each.
    let opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    Array::assemble(devs, &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"))
}

fn write(a: &Array, model: &mut [u8], off: u64, data: &[u8]) {
    a.write(off, data).unwrap();
    model[off as usize..off as usize + data.len()].copy_from_slice(data);
}

/// Bitmap chunks (of member sectors from the data offset) that the writes recorded on a
/// member touched in its data area.
fn chunks_written(writes: &[(u64, u64)], data_offset: u64, data_end: u64) -> std::collections::BTreeSet<u64> {
    let chunk = BITMAP_CHUNK as u64;
    writes
        .iter()
        .filter(|(off, _)| *off >= data_offset && *off < data_end)
        .flat_map(|&(off, len)| {
            let (lo, hi) = (off - data_offset, off - data_offset + len - 1);
            lo / chunk..=hi / chunk
        })
        .collect()
}

fn run_recovery(a: &Array) {
    let mut guard = 0;
    while a.pending_job() == Some(JobKind::Recovery) {
        a.recovery_step(1 << 12).expect("recovery step");
        guard += 1;
        assert!(guard < 100_000);
    }
}

fn device_state(a: &Array, label: &str) -> Option<DeviceState> {
    a.devices().into_iter().find(|d| d.label == label).map(|d| d.state)
}

#[test]
fn a_re_added_member_gets_only_the_regions_written_while_it_was_gone() {
    for (level, disks) in [(Level::Raid5, 4), (Level::Raid6, 5), (Level::Raid1, 2)] {
        let mut shape = Shape::new(level, disks).bitmap(BITMAP_CHUNK);
        shape.member_bytes = 16 << 20;
        let made = make(&shape);
        let m1 = Counting::new(made.members[1].clone());
        let devs: Vec<Arc<dyn Member>> = made
            .members
            .iter()
            .enumerate()
            .map(|(i, m)| if i == 1 { m1.clone() as Arc<dyn Member> } else { m.clone() as Arc<dyn Member> })
            .collect();
        let a = assemble(devs);
        let mut model = vec![0u8; a.size_bytes() as usize];
        random_writes(&a, &mut model, &mut Rng::new(0x5eed + disks as u64), 40);
        a.mark_clean().unwrap();
        let (bsb, bits) = disk_bitmap(made.members[0].as_ref());
        assert_eq!(bits.dirty_chunks().count(), 0, "{level:?}: a clean mark of a whole array clears the bits");
        let cleared_at = bsb.events_cleared;

        // Member 1 fails and is removed; what it holds now is what it will be re-added with.
        a.fail_role(1).unwrap();
        a.remove_device("m1").unwrap();
        let (_, old_sb) = superblock(m1.as_ref());
        let data_offset = old_sb.data_offset_sectors() * 512;
        let data_end = data_offset + a.sync_sectors() * 512;
        let old_bytes = made.members[1].snapshot();

        // Writes to a few regions while degraded, with clean marks in between: the bits stay.
        let size = a.size_bytes();
        write(&a, &mut model, size / 40, &[0xa1; 8192]);
        write(&a, &mut model, size / 40 + 5000, &[0xa2; 700]);
        a.mark_clean().unwrap();
        let (bsb, bits) = disk_bitmap(made.members[0].as_ref());
        let after_first: Vec<u64> = bits.dirty_chunks().collect();
        assert!(!after_first.is_empty(), "{level:?}: a clean mark of a degraded array cleared the bits");
        assert_eq!(bsb.events_cleared, cleared_at, "{level:?}: events_cleared moved while degraded");
        write(&a, &mut model, size / 2, &[0xb1; 4096]);
        write(&a, &mut model, size - 3 * 4096, &[0xc1; 3 * 4096]);
        a.mark_clean().unwrap();
        let (bsb, bits) = disk_bitmap(made.members[0].as_ref());
        let dirty: Vec<u64> = bits.dirty_chunks().collect();
        assert!(after_first.iter().all(|c| dirty.contains(c)), "{level:?}: bits lost at the second clean mark");
        assert_eq!(bsb.events_cleared, cleared_at);
        assert!(dirty.len() >= 2 && (dirty.len() as u64) < bits.chunk_count() / 2, "{level:?}: dirty {dirty:?} of {}", bits.chunk_count());

        // Re-added: its old role back, only the dirty chunks rebuilt.
        m1.take_writes();
        let done = a.re_add_device(m1.clone(), [0x99; 16]).unwrap();
        assert_eq!(done, ReAdd::FromBitmap { role: 1, dirty_chunks: dirty.len() as u64, chunks: bits.chunk_count() }, "{level:?}");
        assert!(done.to_string().starts_with("re-added with bitmap-based resync:"), "{done}");
        assert!(matches!(device_state(&a, "m1"), Some(DeviceState::Recovering { role: 1, .. })));
        // Its superblock is rewritten at once: role 1, rebuilt up to 0, the array's events.
        let (_, sb) = superblock(m1.as_ref());
        assert_eq!((sb.role(), sb.recovery_offset_sectors(), sb.events()), (DeviceRole::Active(1), Some(0), a.events()), "{level:?}");
        assert_eq!(sb.dev_number(), old_sb.dev_number(), "{level:?}: it keeps its device number");
        // A first step checkpoints its progress in its superblock.
        a.recovery_step(4096).unwrap();
        let (_, sb) = superblock(m1.as_ref());
        let Some(DeviceState::Recovering { done: at, .. }) = device_state(&a, "m1") else { panic!("{level:?}: still recovering") };
        assert_eq!((sb.recovery_offset_sectors(), sb.events()), (Some(at), a.events()), "{level:?}");
        run_recovery(&a);
        assert_eq!(device_state(&a, "m1"), Some(DeviceState::InSync(1)), "{level:?}");
        let (_, sb) = superblock(m1.as_ref());
        assert_eq!((sb.role(), sb.recovery_offset_sectors(), sb.events()), (DeviceRole::Active(1), None, a.events()), "{level:?}");

        // (a) Only dirty chunks were written to it; clean ones hold their old bytes.
        let written = chunks_written(&m1.take_writes(), data_offset, data_end);
        let want: std::collections::BTreeSet<u64> = dirty.iter().copied().collect();
        assert_eq!(written, want, "{level:?}: chunks written to the re-added member");
        let now = made.members[1].snapshot();
        let chunk = BITMAP_CHUNK as u64;
        for c in (0..bits.chunk_count()).filter(|c| !want.contains(c)) {
            let (lo, hi) = ((data_offset + c * chunk) as usize, ((data_offset + (c + 1) * chunk).min(data_end)) as usize);
            assert!(now[lo..hi] == old_bytes[lo..hi], "{level:?}: clean chunk {c} changed");
        }
        // (b) Every byte reads back, redundancy is consistent, and the data is on it.
        assert!(read_all(&a) == model, "{level:?}: read-back differs after the re-add");
        assert_eq!(check_clean(&a).mismatch_sectors, 0, "{level:?}: mismatches after the re-add");
        a.fail_role(0).unwrap();
        assert!(read_all(&a) == model, "{level:?}: the re-added member holds wrong data");
        a.close().unwrap();
    }
}

#[test]
fn a_member_that_left_before_the_bits_were_last_cleared_is_rebuilt_in_full() {
    let mut shape = Shape::new(Level::Raid5, 4).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 16 << 20;
    let made = make(&shape);
    let m1 = Counting::new(made.members[1].clone());
    let devs: Vec<Arc<dyn Member>> = made
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| if i == 1 { m1.clone() as Arc<dyn Member> } else { m.clone() as Arc<dyn Member> })
        .collect();
    let a = assemble(devs);
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(77), 30);
    a.mark_clean().unwrap();
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    let (_, old_sb) = superblock(m1.as_ref());
    // A blank spare takes role 1; whole again, a write and a clean mark clear the bits.
    let spare = Arc::new(MemMember::zeroed("s0", shape.member_bytes));
    a.add_device(spare.clone(), [0x55; 16]).unwrap();
    run_recovery(&a);
    assert!(a.missing_roles().is_empty());
    write(&a, &mut model, 12345, &[7u8; 9000]);
    a.mark_clean().unwrap();
    let (bsb, bits) = disk_bitmap(made.members[0].as_ref());
    assert_eq!(bits.dirty_chunks().count(), 0);
    assert!(bsb.events_cleared > old_sb.events(), "the bits were cleared after m1 left");
    // The spare goes; m1's role is missing again, but the bits no longer cover what it missed.
    a.fail_device_by_label("s0").unwrap();
    a.remove_device("s0").unwrap();
    write(&a, &mut model, 3 << 20, &[8u8; 4096]);
    m1.take_writes();
    let done = a.re_add_device(m1.clone(), [0x99; 16]).unwrap();
    let ReAdd::Full { reason } = &done else { panic!("expected a full rebuild, got {done}") };
    assert!(reason.contains("events_cleared"), "{reason}");
    assert!(done.to_string().starts_with("re-added: full rebuild ("), "{done}");
    run_recovery(&a);
    assert!(a.missing_roles().is_empty());
    let (_, sb) = superblock(m1.as_ref());
    let data_offset = sb.data_offset_sectors() * 512;
    let data_end = data_offset + a.sync_sectors() * 512;
    let written = chunks_written(&m1.take_writes(), data_offset, data_end);
    assert_eq!(written.len() as u64, bits.chunk_count(), "a full rebuild writes every chunk");
    assert!(read_all(&a) == model);
    assert_eq!(check_clean(&a).mismatch_sectors, 0);
    a.fail_role(0).unwrap();
    assert!(read_all(&a) == model, "the rebuilt member holds wrong data");
    a.close().unwrap();
}

/// RAID10's bits count array sectors while its rebuild walks member sectors: always in full.
#[test]
fn raid10_re_add_is_a_full_rebuild() {
    let shape = Shape::new(Level::Raid10, 4).bitmap(BITMAP_CHUNK);
    let made = make(&shape);
    let a = open(&made.members, false);
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(5), 20);
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    random_writes(&a, &mut model, &mut Rng::new(6), 10);
    let done = a.re_add_device(made.members[1].clone(), [0x99; 16]).unwrap();
    assert!(matches!(&done, ReAdd::Full { reason } if reason.contains("raid10")), "{done}");
    run_recovery(&a);
    assert!(a.missing_roles().is_empty());
    assert!(read_all(&a) == model);
    assert_eq!(check_clean(&a).mismatch_sectors, 0);
    a.close().unwrap();
}

/// A repair while a member is missing rewrites copies where the present ones disagree; those
/// regions get their bits like a write's, so the member's re-add rebuilds them too (else it
/// would keep copies that disagree with the repaired ones).
#[test]
fn a_repair_while_degraded_marks_what_it_rewrites_for_the_re_add() {
    let mut shape = Shape::new(Level::Raid1, 3).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 16 << 20;
    let made = make(&shape);
    let a = assemble(made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect());
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(3), 20);
    a.mark_clean().unwrap();
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    // Copy 0 goes bad in a region nobody writes (no bit): repair makes copy 2 agree with it.
    let (_, sb) = superblock(made.members[0].as_ref());
    let at = sb.data_offset_sectors() * 512 + (5 << 20);
    made.members[0].write_at(&[0xee; 4096], at).unwrap();
    let mut report = uraid_engine::array::CheckReport::default();
    let mut pos = 0;
    while pos < a.sync_sectors() {
        pos = a.check_step(pos, 1 << 20, true, &mut report).unwrap().done_sectors;
    }
    assert!(report.repaired_rows > 0, "{report:?}");
    let (_, bits) = disk_bitmap(made.members[0].as_ref());
    assert!(bits.is_dirty(5), "the repaired region's bit: {:?}", bits.dirty_chunks().collect::<Vec<_>>());
    let done = a.re_add_device(made.members[1].clone(), [0x99; 16]).unwrap();
    assert!(matches!(done, ReAdd::FromBitmap { .. }), "{done}");
    run_recovery(&a);
    assert_eq!(check_clean(&a).mismatch_sectors, 0, "the re-added copy disagrees with the repaired ones");
    a.close().unwrap();
}

/// A bitmap the array ran without for a while (assembled with --force while it was
/// unreadable) has no bit for the writes of that time: once it is read again (stale), no
/// member that left before can be re-added from it.
#[test]
fn a_stale_bitmap_is_never_trusted_for_a_re_add() {
    let mut shape = Shape::new(Level::Raid5, 4).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 16 << 20;
    let made = make(&shape);
    let devs = || made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect::<Vec<_>>();
    let mut model = vec![0u8; made.members[0].size_bytes() as usize * 3];
    {
        // A first session: written, then clean, so every bit is cleared.
        let a = assemble(devs());
        model.truncate(a.size_bytes() as usize);
        random_writes(&a, &mut model, &mut Rng::new(10), 10);
        a.close().unwrap();
        assert_eq!(disk_bitmap(made.members[0].as_ref()).1.dirty_chunks().count(), 0);
    }
    // The bitmap superblock on every member, broken (then put back below).
    let spots: Vec<(u64, Vec<u8>)> = made
        .members
        .iter()
        .map(|m| {
            let (at, sb) = superblock(m.as_ref());
            let at = sb.bitmap_offset_bytes(at).unwrap();
            let mut head = vec![0u8; 256];
            m.read_at(&mut head, at).unwrap();
            m.write_at(b"XXXX", at).unwrap();
            (at, head)
        })
        .collect();
    let mut opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    opts.assemble.force = true;
    let (a, _) = Array::assemble(devs(), &opts).unwrap();
    random_writes(&a, &mut model, &mut Rng::new(11), 10);
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    // Written while m1 is out, and no bitmap records it.
    write(&a, &mut model, 20 << 20, &[0x3c; 65536]);
    a.close().unwrap();
    drop(a);
    for (m, (at, head)) in made.members.iter().zip(&spots) {
        m.write_at(head, *at).unwrap();
    }
    let survivors: Vec<Arc<dyn Member>> = devs().into_iter().filter(|m| m.label() != "m1").collect();
    let a = assemble(survivors);
    let done = a.re_add_device(made.members[1].clone(), [0x99; 16]).unwrap();
    assert!(matches!(&done, ReAdd::Full { reason } if reason.contains("events_cleared")), "{done}");
    run_recovery(&a);
    assert!(read_all(&a) == model);
    assert_eq!(check_clean(&a).mismatch_sectors, 0);
    a.close().unwrap();
}

/// A former member that was assembled and written apart from the array (a split brain) no
/// longer records the array's members as in sync: it is rebuilt in full, whatever its events.
#[test]
fn a_member_written_apart_from_the_array_is_rebuilt_in_full() {
    let mut shape = Shape::new(Level::Raid1, 2).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 16 << 20;
    let made = make(&shape);
    let a = assemble(made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect());
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(12), 10);
    a.mark_clean().unwrap();
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    // m1 on its own, written where the array is not.
    {
        let alone = open(&made.members[1..], true);
        alone.write(6 << 20, &[0x77; 4096]).unwrap();
        alone.close().unwrap();
    }
    // The array moves on, with more events than m1 has now.
    for i in 0..6 {
        write(&a, &mut model, 1 << 20, &[i as u8; 4096]);
        a.mark_clean().unwrap();
    }
    let (_, sb) = superblock(made.members[1].as_ref());
    assert!(sb.events() <= a.events(), "{} > {}", sb.events(), a.events());
    let done = a.re_add_device(made.members[1].clone(), [0x99; 16]).unwrap();
    assert!(matches!(&done, ReAdd::Full { reason } if reason.contains("does not record")), "{done}");
    run_recovery(&a);
    assert_eq!(check_clean(&a).mismatch_sectors, 0);
    a.fail_role(0).unwrap();
    assert!(read_all(&a) == model, "the re-added member holds what was written apart");
    a.close().unwrap();
}

/// The same on every superblock format: 0.90 (which cannot record a partial rebuild: the
/// member is a spare on disk until it is done), 1.0 (superblock at the end) and 1.1.
#[test]
fn re_add_from_the_bitmap_works_with_every_superblock_format() {
    use uraid_core::metadata::create::{plan_create, CreateRequest, NewDevice};
    use uraid_core::metadata::sb1::MdTime;
    use uraid_core::metadata::MetadataVersion;
    for version in [MetadataVersion::V0_90, MetadataVersion::V1_0, MetadataVersion::V1_1] {
        let bytes = 16usize << 20;
        let members: Vec<Arc<MemMember>> = (0..4).map(|i| Arc::new(MemMember::zeroed(format!("m{i}"), bytes))).collect();
        let new = |i: usize| NewDevice { size_bytes: bytes as u64, device_uuid: [i as u8 + 1; 16] };
        let mut req = CreateRequest::new(
            Level::Raid5,
            "test",
            (0..4).map(|i| Some(new(i))).collect(),
            [0x42; 16],
            MdTime::from_parts(1_700_000_000, 0),
        );
        req.metadata = version;
        req.chunk_bytes = Some(64 * 1024);
        req.initial_sync = uraid_core::metadata::create::InitialSync::AssumeClean;
        req.bitmap = Some(uraid_core::metadata::create::BitmapRequest { chunk_bytes: Some(BITMAP_CHUNK) });
        let plan = plan_create(&req).unwrap_or_else(|e| panic!("{version:?}: {e}"));
        let m: Vec<Option<Arc<dyn Member>>> = members.iter().map(|m| Some(m.clone() as Arc<dyn Member>)).collect();
        uraid_engine::create::write_plan(&plan, &m, &[]).unwrap();
        let devs = || members.iter().map(|m| m.clone() as Arc<dyn Member>).collect::<Vec<_>>();
        let a = assemble(devs());
        let mut model = vec![0u8; a.size_bytes() as usize];
        random_writes(&a, &mut model, &mut Rng::new(13), 20);
        a.mark_clean().unwrap();
        a.fail_role(1).unwrap();
        a.remove_device("m1").unwrap();
        write(&a, &mut model, a.size_bytes() / 3, &[0x42; 20000]);
        a.mark_clean().unwrap();
        let done = a.re_add_device(members[1].clone(), [0x99; 16]).unwrap();
        assert!(matches!(done, ReAdd::FromBitmap { role: 1, .. }), "{version:?}: {done}");
        run_recovery(&a);
        assert!(read_all(&a) == model, "{version:?}");
        assert_eq!(check_clean(&a).mismatch_sectors, 0, "{version:?}");
        a.close().unwrap();
        drop(a);
        // Reassembled from all four: m1 is a member in sync again, and holds the data.
        let a = assemble(devs());
        assert!(a.missing_roles().is_empty(), "{version:?}: {:?}", a.devices());
        a.fail_role(0).unwrap();
        assert!(read_all(&a) == model, "{version:?}");
    }
}

/// A crash during the re-added member's resync: on restart it is a member of its role rebuilt
/// up to its checkpoint, and the rebuild resumes there (in full: the skip is not on disk).
#[test]
fn a_crash_during_a_re_add_resumes_from_the_checkpoint() {
    let mut shape = Shape::new(Level::Raid5, 4).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 16 << 20;
    let made = make(&shape);
    let devs = || made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect::<Vec<_>>();
    let a = assemble(devs());
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(14), 20);
    a.mark_clean().unwrap();
    a.fail_role(1).unwrap();
    a.remove_device("m1").unwrap();
    let size = a.size_bytes();
    write(&a, &mut model, size / 5, &[0x11; 8192]);
    write(&a, &mut model, size - 8192, &[0x22; 8192]);
    a.mark_clean().unwrap();
    assert!(matches!(a.re_add_device(made.members[1].clone(), [0x99; 16]).unwrap(), ReAdd::FromBitmap { .. }));
    a.recovery_step(2048).unwrap();
    let Some(DeviceState::Recovering { done, .. }) = device_state(&a, "m1") else { panic!("recovering") };
    assert!(done > 0 && done < a.sync_sectors());
    std::mem::forget(a);
    let b = assemble(devs());
    assert_eq!(device_state(&b, "m1"), Some(DeviceState::Recovering { role: 1, done }));
    run_recovery(&b);
    assert!(b.missing_roles().is_empty());
    assert!(read_all(&b) == model);
    assert_eq!(check_clean(&b).mismatch_sectors, 0);
    b.fail_role(0).unwrap();
    assert!(read_all(&b) == model);
}

/// A member still listed faulty (an NBD member whose server answers again) is re-added in
/// place; a re-add that fails (here its superblock cannot be read) leaves it listed faulty,
/// to be tried again, instead of dropping it from the array's list.
#[test]
fn a_failed_re_add_in_place_leaves_the_member_listed_faulty() {
    struct Unreadable;
    impl Hooks for Unreadable {
        fn before_read(&self, _image: &MemMember, _len: usize, _offset: u64) -> std::io::Result<()> {
            Err(std::io::Error::other("the server went away again"))
        }
    }
    let mut shape = Shape::new(Level::Raid5, 3).bitmap(BITMAP_CHUNK);
    shape.member_bytes = 8 << 20;
    let made = make(&shape);
    let devs: Vec<Arc<dyn Member>> = made.members.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let a = assemble(devs);
    let mut model = vec![0u8; a.size_bytes() as usize];
    random_writes(&a, &mut model, &mut Rng::new(0x1ead), 10);
    a.fail_role(1).unwrap();
    random_writes(&a, &mut model, &mut Rng::new(0x2ead), 10);
    let gone = Hooked::new(made.members[1].clone(), Unreadable);
    assert!(a.re_add_faulty_device("m1", gone, [0x98; 16]).is_err(), "a member that cannot be read is not re-added");
    assert_eq!(device_state(&a, "m1"), Some(DeviceState::Faulty), "the failed re-add dropped the member from the list");
    assert!(a.re_add_faulty_device("m0", made.members[1].clone(), [0x98; 16]).is_err(), "only a faulty member is re-added in place");
    a.re_add_faulty_device("m1", made.members[1].clone(), [0x99; 16]).unwrap();
    run_recovery(&a);
    assert_eq!(device_state(&a, "m1"), Some(DeviceState::InSync(1)));
    let mut got = vec![0u8; model.len()];
    a.read(0, &mut got).unwrap();
    assert!(got == model, "content after the re-add");
}
