//! Plans the same `mdadm --create` as each real md array in the corpus (made by mdadm 4.2 on
//! Linux 6.1, see `manifest.json` `create_command`) and compares the plan with the
//! superblocks md left on the members, field by field and then byte for byte after
//! copying over what is random, time-dependent or changed by md after creation.
//!
//! The corpus lives at `$URAID_MD_CORPUS`, by default `../../../shared/md-corpus` from this
//! crate; member images are zstd-compressed and decompressed to memory with `zstd`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use uraid_core::geometry::Level;
use uraid_core::metadata::create::{plan_create, BitmapRequest, CreatePlan, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::{detect, BitmapSuperblock, DeviceRole, MdTime, MetadataVersion, Superblock, Superblock1};

fn corpus_dir() -> PathBuf {
    uraid_testkit::MD_CORPUS.path()
}

/// False (and the test recorded as skipped, or failed under CI) when the corpus is missing.
fn have_corpus(test: &str) -> bool {
    uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS, test).is_some()
}

fn decompress(path: &Path) -> Vec<u8> {
    let output = Command::new("zstd")
        .args(["-d", "-c", "-q"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run zstd on {}: {e}", path.display()));
    assert!(output.status.success(), "zstd failed on {}", path.display());
    output.stdout
}

struct CorpusArray {
    name: String,
    manifest: Value,
    images: Vec<Vec<u8>>,
}

fn load(name: &str) -> CorpusArray {
    let dir = corpus_dir().join(name);
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .unwrap_or_else(|e| panic!("corpus array {name} missing at {}: {e}", dir.display()));
    let manifest: Value = serde_json::from_str(&text).expect("manifest is JSON");
    let images = manifest["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| decompress(&dir.join(m["image"].as_str().expect("image"))))
        .collect();
    CorpusArray { name: name.to_string(), manifest, images }
}

fn option<'a>(command: &'a str, key: &str) -> Option<&'a str> {
    command.split_whitespace().find_map(|word| word.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}

/// The uraid request for an mdadm create command line, with the members' real sizes and
/// placeholder uuids/time (copied from the real superblocks before byte comparison).
fn request_for(array: &CorpusArray) -> CreateRequest {
    let command = array.manifest["create_command"].as_str().expect("create_command");
    let level: Level = option(command, "--level").expect("--level").parse().expect("level");
    let raid_devices: usize = option(command, "--raid-devices").expect("raid devices").parse().expect("n");
    let spares: usize = option(command, "--spare-devices").map_or(0, |s| s.parse().expect("n"));
    let sizes: Vec<u64> =
        array.manifest["members"].as_array().expect("members").iter().map(|m| m["raw_size_bytes"].as_u64().expect("size")).collect();
    assert_eq!(sizes.len(), raid_devices + spares, "{}", array.name);
    let device = |i: usize| NewDevice { size_bytes: sizes[i], device_uuid: [i as u8; 16] };
    let mut request = CreateRequest::new(
        level,
        option(command, "--name").expect("name"),
        (0..raid_devices).map(|i| Some(device(i))).collect(),
        [0xaa; 16],
        MdTime::from_parts(1_700_000_000, 0),
    );
    request.spares = (raid_devices..raid_devices + spares).map(device).collect();
    // mdvm's hostname: mdadm stored "mdvm:<name>".
    request.homehost = Some("mdvm".to_string());
    request.chunk_bytes = option(command, "--chunk").map(|kib| kib.parse::<u32>().expect("KiB") * 1024);
    request.layout = option(command, "--layout").map(|layout| match layout {
        "left-asymmetric" => 0,
        "right-asymmetric" => 1,
        "left-symmetric" => 2,
        "right-symmetric" => 3,
        "parity-first" => 4,
        "parity-last" => 5,
        "n2" => 0x102,
        "f2" => 0x201,
        "o2" => 0x10102,
        other => panic!("layout {other}"),
    });
    request.metadata = match option(command, "--metadata") {
        None | Some("1.2") => MetadataVersion::V1_2,
        Some("1.0") => MetadataVersion::V1_0,
        Some("1.1") => MetadataVersion::V1_1,
        Some("0.90") => MetadataVersion::V0_90,
        Some(other) => panic!("metadata {other}"),
    };
    if option(command, "--bitmap") == Some("internal") {
        request.bitmap = Some(BitmapRequest::default());
    }
    if command.contains("--assume-clean") {
        request.initial_sync = InitialSync::AssumeClean;
    }
    request
}

fn real_superblock(array: &CorpusArray, index: usize) -> (Superblock, u64) {
    let bytes = &array.images[index];
    let found = detect(bytes.len() as u64, |offset, len| {
        let start = usize::try_from(offset).map_err(|_| ())?;
        bytes.get(start..start + len).map(<[u8]>::to_vec).ok_or(())
    });
    assert_eq!(found.len(), 1, "{} member {index}", array.name);
    (found[0].superblock.clone(), found[0].location.offset_bytes)
}

/// Arrays whose superblocks still show how they were created (a grow rewrites the shape).
fn comparable_arrays() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("manifest.json").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            let text = std::fs::read_to_string(corpus_dir().join(name).join("manifest.json")).unwrap_or_default();
            let manifest: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            matches!(manifest["scenario"].as_str(), Some("plain" | "degraded"))
        })
        .collect();
    names.sort();
    names
}

/// What md changes in a 1.x superblock after mdadm wrote it, taken from the real one; and
/// mdadm's recovering spare (dev_number past raid_disks) shown in the slot it rebuilt.
fn align_with_md(planned: &mut Superblock1, real: &Superblock1, plan: &CreatePlan) {
    planned.set_uuid = real.set_uuid;
    planned.ctime = real.ctime;
    planned.utime = real.utime;
    planned.events = real.events;
    planned.resync_offset_sectors = real.resync_offset_sectors;
    planned.device_uuid = real.device_uuid;
    for slot in &plan.recovering_slots {
        let spare = plan
            .devices
            .iter()
            .find(|d| d.dev_number as usize >= plan.raid_disks as usize && d.role == DeviceRole::Spare)
            .expect("shortcut spare");
        planned.dev_roles[spare.dev_number as usize] = *slot as u16;
    }
    planned.update_checksum();
}

fn check_array(name: &str) {
    let array = load(name);
    let request = request_for(&array);
    let plan = plan_create(&request).unwrap_or_else(|e| panic!("{name}: {e}"));
    let degraded = array.manifest["scenario"].as_str() == Some("degraded");

    assert_eq!(plan.array_size_sectors * 512, array.manifest["array_size_bytes"].as_u64().expect("array size"), "{name}: array size");
    assert_eq!(plan.devices.len(), array.images.len(), "{name}");

    for (index, device) in plan.devices.iter().enumerate() {
        let what = format!("{name} member {index}");
        let (real, real_offset) = real_superblock(&array, index);
        assert_eq!(device.superblock_offset_bytes, real_offset, "{what}: superblock location");
        match (&device.superblock, &real) {
            (Superblock::V1(planned), Superblock::V1(real)) => {
                assert_eq!(planned.feature_map, real.feature_map, "{what}: feature map");
                assert_eq!(planned.set_name, real.set_name, "{what}: name");
                assert_eq!(planned.level, real.level, "{what}: level");
                assert_eq!(planned.layout, real.layout, "{what}: layout");
                assert_eq!(planned.size_sectors, real.size_sectors, "{what}: size");
                assert_eq!(planned.chunksize_sectors, real.chunksize_sectors, "{what}: chunk");
                assert_eq!(planned.raid_disks, real.raid_disks, "{what}: raid disks");
                assert_eq!(planned.bitmap_offset_raw, real.bitmap_offset_raw, "{what}: bitmap offset");
                assert_eq!(planned.data_offset_sectors, real.data_offset_sectors, "{what}: data offset");
                assert_eq!(planned.data_size_sectors, real.data_size_sectors, "{what}: data size");
                assert_eq!(planned.super_offset_sectors, real.super_offset_sectors, "{what}: super offset");
                assert_eq!(planned.bblog_shift, real.bblog_shift, "{what}: bblog shift");
                assert_eq!(planned.bblog_size_sectors, real.bblog_size_sectors, "{what}: bblog size");
                assert_eq!(planned.bblog_offset_sectors, real.bblog_offset_sectors, "{what}: bblog offset");
                assert_eq!(planned.max_dev(), real.max_dev(), "{what}: max_dev");
                assert_eq!(planned.dev_number, real.dev_number, "{what}: dev_number");
                assert_eq!(planned.pad3, real.pad3, "{what}: pad3");

                // Byte for byte, once the random, timed and md-updated fields are copied.
                // A degraded array's role table records the members md failed later.
                let mut aligned = planned.clone();
                align_with_md(&mut aligned, real, &plan);
                if degraded {
                    aligned.dev_roles = real.dev_roles.clone();
                    aligned.update_checksum();
                }
                assert_eq!(aligned.encode(), real.encode(), "{what}: bytes after alignment");
                assert_eq!(
                    &array.images[index][real_offset as usize..][..device.superblock_bytes().len()],
                    aligned.encode().as_slice(),
                    "{what}: on-disk sector"
                );
            }
            (Superblock::V090(planned), Superblock::V090(real)) => {
                assert_eq!(planned.size_kib, real.size_kib, "{what}: size");
                assert_eq!(planned.level, real.level, "{what}: level");
                assert_eq!(planned.layout, real.layout, "{what}: layout");
                assert_eq!(planned.chunk_size_bytes, real.chunk_size_bytes, "{what}: chunk");
                assert_eq!(planned.raid_disks, real.raid_disks, "{what}: raid disks");
                assert_eq!(planned.minor_version, real.minor_version, "{what}: minor");
                assert_eq!(planned.this_disk.number, real.this_disk.number, "{what}: number");
                assert_eq!(planned.this_disk.raid_disk, real.this_disk.raid_disk, "{what}: raid_disk");
                assert_eq!(planned.role_of_this_device(), real.role_of_this_device(), "{what}: role");
            }
            _ => panic!("{what}: metadata family differs"),
        }
        // mdadm's shortcut spare is the member md recovered into the empty slot.
        let expected_role = match (device.role, plan.recovering_slots.as_slice()) {
            (DeviceRole::Spare, [slot]) if device.dev_number >= plan.raid_disks => DeviceRole::Active(*slot),
            (role, _) => role,
        };
        assert_eq!(expected_role, real.role(), "{what}: role");
    }
}

#[test]
fn plans_match_every_corpus_array() {
    if !have_corpus("create_corpus::plans_match_every_corpus_array") {
        return;
    }
    let names = comparable_arrays();
    assert!(names.len() >= 10, "too few corpus arrays: {names:?}");
    for name in names {
        check_array(&name);
    }
}

#[test]
fn raid5_bitmap_matches_md() {
    if !have_corpus("create_corpus::raid5_bitmap_matches_md") {
        return;
    }
    let array = load("raid5-bitmap-4");
    let plan = plan_create(&request_for(&array)).expect("plan");
    for (index, device) in plan.devices.iter().enumerate() {
        let bitmap = device.bitmap.as_ref().expect("bitmap planned");
        let (real_sb, offset) = real_superblock(&array, index);
        assert_eq!(Some(bitmap.offset_bytes), real_sb.bitmap_offset_bytes(offset));
        let on_disk = &array.images[index][bitmap.offset_bytes as usize..];
        let real = BitmapSuperblock::decode(on_disk).expect("real bitmap");
        let mut planned = bitmap.superblock.clone();
        // md bumps the bitmap events with the superblock's.
        planned.events = real.events;
        planned.events_cleared = real.events_cleared;
        planned.uuid = real.uuid;
        assert_eq!(planned, real, "member {index}: bitmap superblock");
        // mdadm wrote 0xff through the 4 KiB area; md has since cleared the in-range bits
        // (the array is clean), never the bytes past them.
        let area = bitmap.encode();
        assert_eq!(area.len(), 4096);
        let bits_len = bitmap.bits.encode().len();
        assert_eq!(&on_disk[256 + bits_len..4096], &area[256 + bits_len..], "member {index}: tail");
        assert!(bitmap.bits.dirty_chunks().count() as u64 == bitmap.bits.chunk_count());
    }
}
