//! Regression tests for engine bugs the simulator found, all fixed (README.md, "Bugs
//! found"). Each is the minimal reproduction of one bug: it states what md does, what the
//! engine once did instead, and the simulator seed that first exposed it (in strict mode,
//! before the fix: `cargo run -p uraid-sim --release -- --seed N`).

use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_core::metadata::create::InitialSync;
use uraid_core::metadata::MetadataVersion;
use uraid_engine::array::{CheckReport, JobKind};
use uraid_engine::{DeviceState, Member};
use uraid_sim::build::{assemble, crash, create, Spec};
use uraid_sim::SimDisk;

fn pattern(byte: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte ^ (i as u8)).collect()
}

/// Bug A, found by seed 17. A member failed while the array is active keeps its own
/// superblock at events N (active, in sync); the survivors record it faulty at N+1. md
/// (super_1_validate, since 5.x) takes the role from the freshest superblock when a
/// member's events are older, so after a crash before any further superblock update the
/// failed member stays out. The engine once took it back as in sync (within md's one-event
/// tolerance) and served its stale data.
#[test]
fn member_failed_before_a_crash_is_not_taken_back() {
    let disks = create(&Spec::new(Level::Raid1, 2)).unwrap();
    let (a, _) = assemble(&disks, false).unwrap();
    a.write(0, &pattern(1, 4096)).unwrap(); // the array is now active (dirty)
    a.flush().unwrap();
    a.fail_role(1).unwrap(); // d1 keeps its stale superblock
    a.write(0, &pattern(2, 4096)).unwrap(); // only d0 gets this
    a.flush().unwrap();
    crash(a, &disks);

    let (a, _) = assemble(&disks, false).unwrap();
    let d1 = a.devices().into_iter().find(|d| d.label == "d1").map(|d| d.state);
    assert!(!matches!(d1, Some(DeviceState::InSync(_))), "d1 was failed before the crash but was assembled as {d1:?}; its data is stale");
    let mut b = vec![0u8; 4096];
    a.read(0, &mut b).unwrap();
    assert_eq!(b, pattern(2, 4096));
}

/// Bug C, found by seed 79. With 0.90 metadata there is no recovery offset: md records a
/// member under recovery as a spare (neither ACTIVE nor SYNC) until the rebuild ends. The
/// engine once recorded it active and in sync at once, so after a restart a half-rebuilt
/// member was assembled in sync and its unrebuilt part served as data.
#[test]
fn half_rebuilt_090_member_is_not_in_sync_after_restart() {
    let mut spec = Spec::new(Level::Raid5, 3);
    spec.spares = 1;
    spec.metadata = MetadataVersion::V0_90;
    let disks = create(&spec).unwrap();
    let (a, _) = assemble(&disks, false).unwrap();
    let data = pattern(7, 1 << 20);
    a.write(0, &data).unwrap();
    a.fail_role(1).unwrap();
    assert_eq!(a.pending_job(), Some(JobKind::Recovery));
    a.recovery_step(256).unwrap(); // a little of the spare rebuilt
    a.close().unwrap();
    drop(a);

    let survivors: Vec<Arc<SimDisk>> = disks.iter().filter(|d| d.label() != "d1").cloned().collect();
    let (a, _) = assemble(&survivors, false).unwrap();
    let spare = a.devices().into_iter().find(|d| d.label == "d3").map(|d| d.state);
    assert!(!matches!(spare, Some(DeviceState::InSync(_))), "half-rebuilt spare assembled as {spare:?}");
    let mut b = vec![0u8; data.len()];
    a.read(0, &mut b).unwrap();
    assert!(b == data, "array returns unrebuilt data from the half-rebuilt member");
}

/// Bug D, found by seed 34. md stops a resync when a member fails and keeps its checkpoint
/// (recovery_cp), resuming after the rebuild. The engine's resync step once skipped a
/// degraded stripe ("nothing to compare") yet moved the resync position past it: when a
/// member failed during a resync, the rest of the array was recorded as resynced although
/// its parity was never recomputed, so after a spare was rebuilt RAID6's second syndrome
/// still disagreed with the data and a later failure reconstructed garbage from it.
#[test]
fn member_failing_mid_resync_leaves_no_stripe_unsynced() {
    let mut spec = Spec::new(Level::Raid6, 5);
    spec.sync = InitialSync::Resync;
    let disks = create(&spec).unwrap();
    // Inconsistent redundancy, as after a crash: junk over every member's data area.
    for (i, d) in disks.iter().enumerate() {
        d.write_at(&pattern(0x30 + i as u8, 2 << 20), 1 << 20).unwrap();
        d.flush().unwrap();
    }
    let (a, _) = assemble(&disks, false).unwrap();
    assert_eq!(a.pending_job(), Some(JobKind::Resync));
    a.resync_step(a.sync_sectors() / 4).unwrap();
    a.fail_role(0).unwrap(); // a member fails during the resync
                             // The job driver finishes the step it is in (in the simulator the failure happened
                             // inside a step; here the rest of the pass runs as that step would have).
    let _ = a.resync_step(u64::MAX);
    let spare = Arc::new(SimDisk::new("spare", spec.member_bytes, 9));
    a.add_device(spare, [0xEE; 16]).unwrap();
    while let Some(job) = a.pending_job() {
        match job {
            JobKind::Recovery => a.recovery_step(1 << 12).map(|_| ()).unwrap(),
            JobKind::Resync => a.resync_step(1 << 12).map(|_| ()).unwrap(),
            _ => break,
        }
    }
    assert!(a.missing_roles().is_empty());
    let mut report = CheckReport::default();
    let mut pos = 0;
    while pos < a.sync_sectors() {
        pos = a.check_step(pos, 1 << 14, false, &mut report).unwrap().done_sectors;
    }
    assert_eq!(report.mismatch_sectors, 0, "stripes skipped by the interrupted resync were never synced: {report:?}");
}

/// Bug B, found by seed 7. md resyncs a dirty array that still has redundancy: RAID6 with
/// one member missing, RAID1 with two or more copies left, RAID10 with a copy pair intact.
/// The engine's `pending_job` once offered no resync while any role was missing, so after
/// an unclean shutdown the copies of a 3-way RAID1 missing one member could differ, and
/// which value a read returned depended on which member failed next.
#[test]
fn degraded_three_way_mirror_is_resynced_after_a_crash() {
    let disks = create(&Spec::new(Level::Raid1, 3)).unwrap();
    let (a, _) = assemble(&disks, false).unwrap();
    a.fail_role(2).unwrap();
    a.write(0, &pattern(1, 4096)).unwrap(); // unflushed: may survive on one copy only
    crash(a, &disks);
    // Make the copies disagree for sure: d0 got the write, d1 did not.
    disks[0].write_at(&pattern(1, 4096), disks_data_offset(&disks[0])).unwrap();
    disks[1].write_at(&pattern(9, 4096), disks_data_offset(&disks[1])).unwrap();
    let (a, report) = assemble(&disks[..2], false).unwrap();
    assert!(report.needs_resync);
    assert_eq!(a.pending_job(), Some(JobKind::Resync), "md resyncs a dirty RAID1 that still has two copies");
}

fn disks_data_offset(d: &SimDisk) -> u64 {
    uraid_engine::scan::probe(d).best().map(|(_, sb)| sb.data_offset_sectors() * 512).unwrap_or(0)
}
