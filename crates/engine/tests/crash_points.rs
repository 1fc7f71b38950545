//! A crash at any write of a membership change (a hot replace or a rebuild finishing, a
//! rebuild starting) leaves members that assemble, without `--force` or `--run`, into an
//! array holding every write acknowledged before the change; a hot replace even while the
//! array is dirty (a dirty array needs every role at restart).
//!
//! Each test records every member write of the change in order, then rebuilds the members as
//! a crash after each prefix of those writes would leave them and assembles that. The engine
//! writes superblocks one member at a time, each flushed before the next, so every prefix is
//! a state a crash can leave.
//!
//! How this was shown to fail: before the superblock of a member taking a role was written
//! first, the crash after every member but the replacement had its new superblock left role
//! 0's old member recorded as faulty and the replacement still a spare on disk, and assembly
//! refused a dirty degraded array (the concurrent simulator found it first, seeds 22031 and
//! 22107).

mod common;
use common::*;
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_engine::array::{DeviceState, JobKind};
use uraid_engine::{Array, ArrayOptions, MemMember, Member};

struct Rig {
    images: Vec<Arc<MemMember>>,
    journal: Arc<WriteJournal>,
    array: Array,
    model: Vec<u8>,
}

/// A dirty array of `shape` (members then spares) over journaled members, with random data.
fn rig(shape: &Shape, seed: u64) -> Rig {
    let made = make(shape);
    let images: Vec<Arc<MemMember>> = made.members.into_iter().chain(made.spares).collect();
    let journal = Arc::new(WriteJournal::default());
    let devs: Vec<Arc<dyn Member>> = images
        .iter()
        .enumerate()
        .map(|(index, m)| Hooked::new(m.clone(), Journaled { index, journal: journal.clone() }) as Arc<dyn Member>)
        .collect();
    let opts = ArrayOptions { writable: true, ..Default::default() };
    let (array, _) = Array::assemble(devs, &opts).expect("assemble");
    let mut model = read_all(&array);
    let mut rng = Rng::new(seed);
    random_writes(&array, &mut model, &mut rng, 40);
    // Left dirty on purpose: a dirty array needs every role at restart, the hard case.
    Rig { images, journal, array, model }
}

/// Runs `change` with the journal on, then assembles the members as a crash after each
/// prefix of its writes leaves them; each must hold the model. Returns how many crash points
/// were tried.
fn crash_at_every_write(rig: &Rig, change: impl FnOnce(&Array)) -> usize {
    let before: Vec<Vec<u8>> = rig.images.iter().map(|m| m.snapshot()).collect();
    rig.journal.start();
    change(&rig.array);
    let writes = rig.journal.stop();
    assert!(!writes.is_empty(), "the change wrote nothing");
    for k in 0..=writes.len() {
        let devs = after_prefix(&rig.images, &before, &writes[..k]);
        let opts = ArrayOptions { writable: false, ..Default::default() };
        let (array, _) = Array::assemble(devs, &opts)
            .unwrap_or_else(|e| panic!("crash after write {k} of {}: the members do not assemble: {e}", writes.len()));
        assert!(read_all(&array) == rig.model, "crash after write {k} of {}: the array lost acknowledged writes", writes.len());
    }
    writes.len() + 1
}

/// The devices as a crash after `writes` (a prefix of the journal) leaves them: `before`
/// with those writes applied, named as `images`.
fn after_prefix(images: &[Arc<MemMember>], before: &[Vec<u8>], writes: &[(usize, u64, Vec<u8>)]) -> Vec<Arc<dyn Member>> {
    let mut disks = before.to_vec();
    for (index, offset, bytes) in writes {
        disks[*index][*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
    }
    disks
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| Arc::new(MemMember::new(images[i].label().to_string(), bytes)) as Arc<dyn Member>)
        .collect()
}

/// Runs recovery steps (one region each, from the start) until one region is left.
fn run_recovery_until_last_step(a: &Array) {
    let mut guard = 0;
    let mut region = None;
    loop {
        assert_eq!(a.pending_job(), Some(JobKind::Recovery), "no recovery to run");
        let p = a.recovery_step(1).expect("recovery step");
        // A step rebuilds one region; the first one, from sector 0, gives its size.
        let region = *region.get_or_insert(p.done_sectors);
        assert!(p.done_sectors < p.total_sectors, "the recovery ended before its last step was reached");
        if p.total_sectors - p.done_sectors <= region {
            return;
        }
        guard += 1;
        assert!(guard < 100_000, "recovery does not end");
    }
}

fn last_recovery_step(a: &Array) {
    let p = a.recovery_step(1).expect("last recovery step");
    assert_eq!(p.done_sectors, p.total_sectors, "that was not the last step");
}

fn small(level: Level, disks: usize) -> Shape {
    let mut s = Shape::new(level, disks).spares(1);
    s.member_bytes = 8 << 20;
    s.chunk_kib = 16;
    s
}

#[test]
fn a_crash_while_a_hot_replace_completes_keeps_every_write() {
    for (level, disks, seed) in [(Level::Raid5, 4, 1), (Level::Raid6, 5, 2), (Level::Raid1, 2, 3), (Level::Raid10, 4, 4)] {
        let rig = rig(&small(level, disks), seed);
        rig.array.replace_with_spare("m0", "s0").expect("replace");
        run_recovery_until_last_step(&rig.array);
        let points = crash_at_every_write(&rig, last_recovery_step);
        let m0 = rig.array.devices().into_iter().find(|d| d.label == "m0").unwrap();
        assert_eq!(m0.state, DeviceState::Faulty, "{level:?}: the replaced member left");
        assert!(points > disks, "{level:?}: the completion wrote every superblock");
    }
}

#[test]
fn a_crash_while_a_rebuild_starts_or_completes_keeps_every_write() {
    for (level, disks, seed) in [(Level::Raid5, 4, 5), (Level::Raid6, 5, 6), (Level::Raid1, 2, 7)] {
        let rig = rig(&small(level, disks), seed);
        // Marked clean first: md (and uraid) refuse to start a dirty degraded RAID4/5/6
        // without --force, so a dirty array losing a member is not this test's subject.
        rig.array.mark_clean().expect("mark clean");
        // A member fails; the spare takes its role (the start writes every superblock).
        crash_at_every_write(&rig, |a| {
            a.fail_device_by_label("m1").expect("fail m1");
        });
        run_recovery_until_last_step(&rig.array);
        crash_at_every_write(&rig, last_recovery_step);
        let s0 = rig.array.devices().into_iter().find(|d| d.label == "s0").unwrap();
        assert!(matches!(s0.state, DeviceState::InSync(1)), "{level:?}: the spare holds role 1: {:?}", s0.state);
    }
}

/// A stopped array (members then spares) holding random data, marked clean, and its
/// content; `grow_by` bytes of random "new disk" appended to every device afterwards.
fn stopped(shape: &Shape, seed: u64, grow_by: usize) -> (Vec<Arc<MemMember>>, Vec<u8>) {
    let made = make(shape);
    let images: Vec<Arc<MemMember>> = made.members.into_iter().chain(made.spares).collect();
    let devs: Vec<Arc<dyn Member>> = images.iter().map(|m| m.clone() as Arc<dyn Member>).collect();
    let opts = ArrayOptions { writable: true, ..Default::default() };
    let (array, _) = Array::assemble(devs, &opts).expect("assemble");
    let mut model = read_all(&array);
    random_writes(&array, &mut model, &mut Rng::new(seed), 40);
    array.close().expect("close");
    drop(array);
    let images = images
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let mut bytes = m.snapshot();
            bytes.extend(Rng::new(seed ^ (i as u64 + 1)).bytes(grow_by));
            Arc::new(MemMember::new(m.label().to_string(), bytes))
        })
        .collect();
    (images, model)
}

/// Runs `change` on the stopped array's devices with the journal on, then assembles the
/// devices as a crash after each prefix of its writes leaves them (with --run: some changes
/// leave the array degraded by design); each must read the content.
fn crash_at_every_write_stopped(images: &[Arc<MemMember>], model: &[u8], what: &str, change: impl FnOnce(&[Arc<dyn Member>])) {
    let before: Vec<Vec<u8>> = images.iter().map(|m| m.snapshot()).collect();
    let journal = Arc::new(WriteJournal::default());
    let devs: Vec<Arc<dyn Member>> = images
        .iter()
        .enumerate()
        .map(|(index, m)| Hooked::new(m.clone(), Journaled { index, journal: journal.clone() }) as Arc<dyn Member>)
        .collect();
    journal.start();
    change(&devs);
    let writes = journal.stop();
    assert!(writes.len() >= 2, "{what}: the change wrote {} superblocks", writes.len());
    for k in 0..=writes.len() {
        let devs = after_prefix(images, &before, &writes[..k]);
        let mut opts = ArrayOptions { writable: false, ..Default::default() };
        opts.assemble.run = true;
        let (array, _) = Array::assemble(devs, &opts)
            .unwrap_or_else(|e| panic!("{what}: crash after write {k} of {}: the members do not assemble: {e}", writes.len()));
        let got = read_all(&array);
        assert!(
            got.len() >= model.len() && got[..model.len()] == *model,
            "{what}: crash after write {k} of {}: content lost",
            writes.len()
        );
    }
}

/// Takeovers and size changes rewrite every superblock one by one while no data moves: a
/// crash between two of them leaves members one event behind with the old shape, which
/// assembly reads with the newest shape and role table, as md takes them from the freshest
/// superblock. How this was shown to fail: with that adoption switched off, the RAID5 ->
/// RAID6 crash after the first write (the spare's superblock, written first) left the
/// three members refused as a split brain (they record the spare as not active), and the
/// array did not assemble (the other cases meet the shape check, `inconsistent_member`,
/// which refuses members that "disagree").
#[test]
fn a_crash_while_a_takeover_or_a_size_change_rewrites_the_superblocks_keeps_the_content() {
    use uraid_core::metadata::grow::GrowRequest;
    use uraid_core::metadata::resize::SizeAsk;
    use uraid_engine::reshape::{resize, take_over};
    let opts = ArrayOptions { writable: true, ..Default::default() };
    let level = |l| GrowRequest { level: Some(l), ..Default::default() };
    let cases: [(&str, Shape, Option<i32>); 7] = [
        ("raid5 -> raid6", small(Level::Raid5, 3), Some(6)),
        ("raid6 -> raid5", Shape::new(Level::Raid6, 4).layout(18), Some(5)),
        ("raid5 parity-last -> raid0", Shape::new(Level::Raid5, 3).layout(5), Some(0)),
        ("raid0 -> raid5", Shape::new(Level::Raid0, 3), Some(5)),
        ("raid1 -> raid5", Shape::new(Level::Raid1, 2), Some(5)),
        ("raid5 --size max", small(Level::Raid5, 3), None),
        // The bitmap is resized first: a new size with the old, shorter bitmap would be
        // refused at assembly.
        ("raid5 --size max with a bitmap", small(Level::Raid5, 3).bitmap(64 << 10), None),
    ];
    for (seed, (what, shape, to)) in cases.into_iter().enumerate() {
        let grow_by = if to.is_none() { 1 << 20 } else { 0 };
        let (images, model) = stopped(&shape, seed as u64, grow_by);
        crash_at_every_write_stopped(&images, &model, what, |devs| match to {
            Some(l) => {
                take_over(devs, &opts, &level(l)).unwrap_or_else(|e| panic!("{what}: {e}")).expect("a takeover");
            }
            None => {
                resize(devs, &opts, SizeAsk::Max).unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        });
    }
}

/// A crash while the clean mark goes out (members rewritten one by one) leaves the first
/// members clean one event ahead of the rest, still dirty. md takes clean or dirty from the
/// freshest superblocks, and the data is all on disk before the mark starts, so the array
/// is clean and survives losing any member without --force. (Before, any member saying
/// dirty made it dirty at assembly while the engine read it clean from the newest: it was
/// never resynced nor rewritten, and after losing a member it refused to start; the shrink
/// crash test in reshape.rs found it at the close of a finished reshape.)
#[test]
fn a_crash_during_the_clean_mark_leaves_a_clean_array_that_survives_a_member_loss() {
    for (level, disks) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let shape = small(level, disks);
        let made = make(&shape);
        let array = open(&made.members, false);
        let mut model = read_all(&array);
        let mut rng = Rng::new(disks as u64);
        random_writes(&array, &mut model, &mut rng, 20);
        array.flush().expect("flush");
        let dirty: Vec<Vec<u8>> = made.members.iter().map(|m| m.snapshot()).collect();
        array.close().expect("close");
        drop(array);
        // The clean mark reached the first `first_clean` members only.
        for first_clean in 1..disks {
            let crashed: Vec<Arc<MemMember>> = made
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| Arc::new(MemMember::new(format!("m{i}"), if i < first_clean { m.snapshot() } else { dirty[i].clone() })))
                .collect();
            for lost in 0..disks {
                let left: Vec<Arc<dyn Member>> =
                    crashed.iter().enumerate().filter(|(i, _)| *i != lost).map(|(_, m)| m.clone() as Arc<dyn Member>).collect();
                let mut opts = ArrayOptions::default();
                opts.assemble.run = true;
                let what = format!("{level:?}: clean mark on {first_clean} of {disks} members, member {lost} lost");
                if first_clean == 1 && lost == 0 {
                    // The only clean superblock lost: the newest left are dirty, a dirty
                    // degraded array, which md refuses without --force too.
                    assert!(Array::assemble(left, &opts).is_err(), "{what}: started dirty and degraded");
                    continue;
                }
                let (a, report) = Array::assemble(left, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(!report.needs_resync, "{what}: assembled dirty");
                assert!(read_all(&a) == model, "{what}: data differs");
            }
        }
    }
}
