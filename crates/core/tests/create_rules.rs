//! The create planner's rules that the corpus does not show: refusals, missing members,
//! spares, mdadm's recovery shortcut, 0.90 and 1.0 placement, bitmaps on large members.

use uraid_core::geometry::Level;
use uraid_core::metadata::create::{plan_create, BitmapRequest, CreateError, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::{DeviceRole, MdTime, MetadataVersion, Superblock, MAX_SECTOR};

const MIB: u64 = 1 << 20;

fn dev(size_bytes: u64, n: u8) -> NewDevice {
    NewDevice { size_bytes, device_uuid: [n; 16] }
}

fn request(level: Level, sizes: &[Option<u64>]) -> CreateRequest {
    let members = sizes.iter().enumerate().map(|(i, s)| s.map(|s| dev(s, i as u8))).collect();
    CreateRequest::new(level, "t", members, [7; 16], MdTime::from_parts(1_700_000_000, 0))
}

fn sb1(plan_device: &uraid_core::metadata::create::PlannedDevice) -> &uraid_core::metadata::Superblock1 {
    match &plan_device.superblock {
        Superblock::V1(sb) => sb,
        Superblock::V090(_) => panic!("expected 1.x"),
    }
}

#[test]
fn refusals_say_what_is_wrong() {
    let r = request(Level::Raid6, &[Some(16 * MIB); 3]);
    assert!(matches!(plan_create(&r), Err(CreateError::TooFewDevices { minimum: 4, .. })));

    let mut r = request(Level::Raid5, &[Some(16 * MIB); 3]);
    r.chunk_bytes = Some(48 * 1024);
    assert!(matches!(plan_create(&r), Err(CreateError::BadChunk { chunk_bytes: 49152 })));
    r.chunk_bytes = Some(2048);
    assert!(matches!(plan_create(&r), Err(CreateError::BadChunk { .. })));

    let mut r = request(Level::Raid5, &[Some(16 * MIB); 3]);
    r.layout = Some(7);
    assert!(matches!(plan_create(&r), Err(CreateError::BadLayout { layout: 7, .. })));

    let mut r = request(Level::Raid10, &[Some(16 * MIB); 3]);
    r.layout = Some(0x202); // 4 copies on 3 devices
    assert!(matches!(plan_create(&r), Err(CreateError::BadLayout { .. })));

    let mut r = request(Level::Raid1, &[Some(16 * MIB); 2]);
    r.chunk_bytes = Some(65536);
    assert!(matches!(plan_create(&r), Err(CreateError::ChunkNotAllowed { .. })));

    let mut r = request(Level::Raid1, &[Some(16 * MIB); 2]);
    r.name = "x".repeat(32);
    let err = plan_create(&r).expect_err("32-byte name");
    assert!(err.to_string().contains("at most 31"), "{err}");

    let r = request(Level::Raid5, &[Some(16 * MIB), Some(512 * 1024), Some(16 * MIB)]);
    let err = plan_create(&r).expect_err("too small");
    match &err {
        CreateError::DeviceTooSmall { size_bytes, minimum_bytes, .. } => {
            assert_eq!(*size_bytes, 512 * 1024);
            // 2 MiB data offset (two 512 KiB chunks of reshape headroom) + one chunk.
            assert_eq!(*minimum_bytes, 2560 * 1024);
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("member 1"), "{err}");

    let r = request(Level::Raid0, &[Some(16 * MIB), None]);
    assert!(matches!(plan_create(&r), Err(CreateError::MissingNotSupported { .. })));
    let r = request(Level::Raid5, &[Some(16 * MIB), None, None]);
    assert!(matches!(plan_create(&r), Err(CreateError::TooManyMissing { tolerated: 1, .. })));
    let r = request(Level::Raid1, &[None, None]);
    assert!(matches!(plan_create(&r), Err(CreateError::AllMissing)));
    let r = request(Level::Raid10, &[Some(16 * MIB), Some(16 * MIB), None, None]);
    assert!(matches!(plan_create(&r), Err(CreateError::Raid10CopiesMissing { .. })));
    // n2 on 4: slots 0 and 2 are in different mirror pairs, so it can start.
    let r = request(Level::Raid10, &[None, Some(16 * MIB), None, Some(16 * MIB)]);
    assert!(plan_create(&r).is_ok());

    let mut r = request(Level::Raid1, &[Some(16 * MIB); 28]);
    r.metadata = MetadataVersion::V0_90;
    assert!(matches!(plan_create(&r), Err(CreateError::TooManyDevices { maximum: 27, .. })));

    let mut r = request(Level::Raid1, &[Some(5 << 40); 2]);
    r.metadata = MetadataVersion::V0_90;
    assert!(matches!(plan_create(&r), Err(CreateError::Sb090ComponentTooLarge { .. })));

    let mut r = request(Level::Raid0, &[Some(16 * MIB), Some(8 * MIB)]);
    r.metadata = MetadataVersion::V0_90;
    assert!(matches!(plan_create(&r), Err(CreateError::Sb090MultiZoneRaid0)));

    let mut r = request(Level::Raid0, &[Some(16 * MIB); 2]);
    r.bitmap = Some(BitmapRequest::default());
    assert!(matches!(plan_create(&r), Err(CreateError::BitmapNotAllowed { .. })));

    let mut r = request(Level::Raid6, &[Some(16 * MIB), None, Some(16 * MIB), Some(16 * MIB)]);
    r.initial_sync = InitialSync::Resync;
    assert!(matches!(plan_create(&r), Err(CreateError::DirtyDegradedRaid6)));

    let mut r = request(Level::Raid5, &[Some(16 * MIB); 3]);
    r.size_bytes = Some(20 * MIB);
    assert!(matches!(plan_create(&r), Err(CreateError::DeviceSmallerThanSize { .. })));
}

#[test]
fn missing_members_keep_their_number_and_role_ffff() {
    let r = request(Level::Raid5, &[Some(16 * MIB), None, Some(16 * MIB), Some(16 * MIB)]);
    let plan = plan_create(&r).expect("plan");
    assert_eq!(plan.devices.len(), 3);
    let numbers: Vec<u32> = plan.devices.iter().map(|d| d.dev_number).collect();
    assert_eq!(numbers, vec![0, 2, 3]);
    let sb = sb1(&plan.devices[0]);
    assert_eq!(&sb.dev_roles[..4], &[0, 0xffff, 2, 3]);
    assert_eq!(sb.max_dev(), 128);
    // Degraded raid5 is written clean: nothing to resync, md rebuilds when a disk is added.
    assert!(!plan.needs_resync);
    assert_eq!(sb.resync_offset_sectors, MAX_SECTOR);
    assert!(plan.recovering_slots.is_empty());
}

#[test]
fn sync_policies() {
    // mdadm default for raid5: last member becomes a spare numbered after the slots.
    let plan = plan_create(&request(Level::Raid5, &[Some(16 * MIB); 4])).expect("plan");
    assert_eq!(plan.recovering_slots, vec![3]);
    assert_eq!(plan.devices[3].dev_number, 4);
    assert_eq!(plan.devices[3].role, DeviceRole::Spare);
    assert!(!plan.needs_resync);

    let mut r = request(Level::Raid5, &[Some(16 * MIB); 4]);
    r.initial_sync = InitialSync::Resync;
    let plan = plan_create(&r).expect("plan");
    assert!(plan.recovering_slots.is_empty());
    assert!(plan.needs_resync);
    assert_eq!(sb1(&plan.devices[3]).resync_offset_sectors, 0);
    assert_eq!(plan.devices[3].role, DeviceRole::Active(3));

    let mut r = request(Level::Raid6, &[Some(16 * MIB); 4]);
    r.initial_sync = InitialSync::AssumeClean;
    let plan = plan_create(&r).expect("plan");
    assert!(!plan.needs_resync);
    assert!(plan.devices.iter().all(|d| sb1(d).resync_offset_sectors == MAX_SECTOR));

    // raid6 missing its last slot: mdadm turns the slot before it into a recovering spare.
    let r = request(Level::Raid6, &[Some(16 * MIB), Some(16 * MIB), Some(16 * MIB), None]);
    let plan = plan_create(&r).expect("plan");
    assert_eq!(plan.recovering_slots, vec![2]);
    assert_eq!(plan.devices[2].role, DeviceRole::Spare);
    assert_eq!(plan.devices[2].dev_number, 4);

    // raid1 resyncs; a spare is numbered after the members.
    let mut r = request(Level::Raid1, &[Some(16 * MIB); 2]);
    r.spares = vec![dev(16 * MIB, 9)];
    let plan = plan_create(&r).expect("plan");
    assert!(plan.needs_resync);
    assert_eq!(plan.devices[2].dev_number, 2);
    assert_eq!(plan.devices[2].role, DeviceRole::Spare);
}

#[test]
fn metadata_placement() {
    // 1.0 at the end, 0.90 in the last aligned 64 KiB, 1.1 at 0.
    let mut r = request(Level::Raid1, &[Some(16 * MIB); 2]);
    r.metadata = MetadataVersion::V1_0;
    let plan = plan_create(&r).expect("plan");
    assert_eq!(plan.devices[0].superblock_offset_bytes, 32752 * 512);
    assert_eq!(plan.devices[0].data_offset_sectors, 0);

    r.metadata = MetadataVersion::V1_1;
    let plan = plan_create(&r).expect("plan");
    assert_eq!(plan.devices[0].superblock_offset_bytes, 0);
    assert_eq!(sb1(&plan.devices[0]).bblog_offset_sectors, 16);
    assert_eq!(plan.devices[0].data_offset_sectors, 2048);

    r.metadata = MetadataVersion::V0_90;
    let plan = plan_create(&r).expect("plan");
    assert_eq!(plan.devices[0].superblock_offset_bytes, 32640 * 512);
    assert_eq!(plan.component_size_sectors, 32640);
    let Superblock::V090(sb) = &plan.devices[1].superblock else { panic!("0.90") };
    assert_eq!(sb.events, 1);
    assert_eq!(sb.this_disk.number, 1);
    assert_eq!(sb.array_uuid().0, [7; 16]);
    // Round trip through the codec proves the checksum.
    let bytes = plan.devices[1].superblock_bytes();
    assert_eq!(bytes.len(), 4096);
    assert_eq!(uraid_core::metadata::Superblock090::decode(&bytes).as_ref(), Ok(sb));
}

#[test]
fn bitmaps() {
    // 1.0: bitmap before the superblock, after the bad-block log.
    let mut r = request(Level::Raid5, &[Some(16 * MIB); 4]);
    r.metadata = MetadataVersion::V1_0;
    r.bitmap = Some(BitmapRequest::default());
    let plan = plan_create(&r).expect("plan");
    let sb = sb1(&plan.devices[0]);
    assert_eq!(sb.bitmap_offset_sectors(), Some(-16));
    assert_eq!(sb.bblog_offset_sectors, -8);
    let bitmap = plan.devices[0].bitmap.as_ref().expect("bitmap");
    assert_eq!(bitmap.offset_bytes, (32752 - 16) * 512);
    assert_eq!(bitmap.superblock.chunksize_bytes, 64 << 20);

    // 1 TB raid1 with bitmap: 128 KiB of room, chunk stays at 64 MiB.
    let mut r = request(Level::Raid1, &[Some(1_000_204_886_016); 2]);
    r.bitmap = Some(BitmapRequest::default());
    let plan = plan_create(&r).expect("plan");
    let sb = sb1(&plan.devices[0]);
    assert_eq!(sb.data_offset_sectors, 264_192);
    assert_eq!(sb.bitmap_offset_sectors(), Some(8));
    let bitmap = plan.devices[0].bitmap.as_ref().expect("bitmap");
    assert_eq!(bitmap.superblock.chunksize_bytes, 64 << 20);
    assert_eq!(bitmap.area_bytes, 4096);
    assert_eq!(sb.bblog_offset_sectors, 16);

    // A bitmap chunk too small for the room is refused.
    let mut r = request(Level::Raid1, &[Some(1_000_204_886_016); 2]);
    r.bitmap = Some(BitmapRequest { chunk_bytes: Some(4096) });
    assert!(matches!(plan_create(&r), Err(CreateError::BadBitmapChunk { .. })));
}

#[test]
fn every_superblock_decodes() {
    for level in [Level::Linear, Level::Raid0, Level::Raid1, Level::Raid4, Level::Raid5, Level::Raid6, Level::Raid10] {
        for metadata in [MetadataVersion::V0_90, MetadataVersion::V1_0, MetadataVersion::V1_1, MetadataVersion::V1_2] {
            let mut r = request(level, &[Some(16 * MIB), Some(20 * MIB), Some(24 * MIB), Some(16 * MIB)]);
            r.metadata = metadata;
            let plan = match plan_create(&r) {
                Ok(plan) => plan,
                Err(CreateError::Sb090MultiZoneRaid0) => continue,
                Err(e) => panic!("{level} {metadata}: {e}"),
            };
            for device in &plan.devices {
                let bytes = device.superblock_bytes();
                let decoded = Superblock::decode(metadata, &bytes).expect("decodes");
                assert_eq!(decoded, device.superblock, "{level} {metadata}");
                assert_eq!(decoded.version(), metadata);
            }
            assert!(plan.array_size_sectors > 0);
            assert_eq!(
                plan.devices[0]
                    .superblock
                    .shape()
                    .array_size_sectors(&plan.devices.iter().map(|d| d.data_size_sectors).collect::<Vec<_>>()),
                Ok(plan.array_size_sectors),
                "{level} {metadata}: ArrayShape agrees with Geometry"
            );
        }
    }
}
