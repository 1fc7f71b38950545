//! Decodes the superblocks of real md arrays (made by Linux 6.1 / mdadm 4.2) and compares
//! them with what `mdadm --examine` printed, then re-encodes them byte-exact and assembles
//! each array as mdadm did.
//!
//! The corpus lives at `$URAID_MD_CORPUS`, by default `../../../shared/md-corpus` from this
//! crate. Member images are zstd-compressed; the `zstd` binary decompresses them to memory.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use uraid_core::assemble::{assemble, AssembleOptions, Candidate, Decision};
use uraid_core::metadata::{detect, BitmapSuperblock, DeviceRole, MetadataVersion, Superblock, WriteIntentBits};

fn corpus_dir() -> PathBuf {
    uraid_testkit::MD_CORPUS.path()
}

/// False (and the test recorded as skipped, or failed under CI) when the corpus is missing.
fn have_corpus(test: &str) -> bool {
    uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS, test).is_some()
}

struct Member {
    image: String,
    bytes: Vec<u8>,
    manifest: Value,
}

struct Array {
    name: String,
    manifest: Value,
    members: Vec<Member>,
}

fn decompress(path: &Path) -> Vec<u8> {
    let output = Command::new("zstd")
        .arg("-d")
        .arg("-c")
        .arg("-q")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run zstd on {}: {e}", path.display()));
    assert!(output.status.success(), "zstd failed on {}", path.display());
    output.stdout
}

fn load_array(name: &str) -> Array {
    let dir = corpus_dir().join(name);
    let text = std::fs::read_to_string(dir.join("manifest.json"))
        .unwrap_or_else(|e| panic!("corpus array {name} missing at {}: {e}", dir.display()));
    let manifest: Value = serde_json::from_str(&text).expect("manifest is JSON");
    let members = manifest["members"]
        .as_array()
        .expect("members array")
        .iter()
        .map(|member| {
            let image = member["image"].as_str().expect("image name").to_string();
            Member { bytes: decompress(&dir.join(&image)), image, manifest: member.clone() }
        })
        .collect();
    Array { name: name.to_string(), manifest, members }
}

fn all_array_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .expect("corpus directory")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("manifest.json").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn read_at(bytes: &[u8]) -> impl FnMut(u64, usize) -> Result<Vec<u8>, String> + '_ {
    move |offset, len| {
        let start = usize::try_from(offset).map_err(|e| e.to_string())?;
        bytes.get(start..start + len).map(<[u8]>::to_vec).ok_or_else(|| "short".to_string())
    }
}

/// The one superblock on a member, with the offset it was found at.
fn superblock_of(member: &Member) -> (Superblock, u64) {
    let found = detect(member.bytes.len() as u64, read_at(&member.bytes));
    assert_eq!(found.len(), 1, "{}: expected one superblock, found {found:?}", member.image);
    (found[0].superblock.clone(), found[0].location.offset_bytes)
}

fn examine_line<'a>(member: &'a Member, key: &str) -> Option<&'a str> {
    let text = member.manifest["examine_text"].as_str()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(" : ")?;
        (name.trim() == key).then(|| value.trim())
    })
}

fn check_member_against_examine(array: &Array, member: &Member) {
    let what = format!("{}/{}", array.name, member.image);
    let examine = &member.manifest["examine"];
    let (sb, offset) = superblock_of(member);

    let version = examine["version"].as_str().expect("version");
    let expected_version = match version {
        "0.90.00" => MetadataVersion::V0_90,
        "1.0" => MetadataVersion::V1_0,
        "1.1" => MetadataVersion::V1_1,
        "1.2" => MetadataVersion::V1_2,
        other => panic!("{what}: unexpected version {other}"),
    };
    assert_eq!(sb.version(), expected_version, "{what}: version");

    let uuid = examine["array_uuid"].as_str().expect("uuid");
    let uuid = uuid.split(' ').next().unwrap_or(uuid);
    assert_eq!(sb.array_uuid().to_string(), uuid, "{what}: array uuid");

    let events: u64 = examine["events"].as_str().expect("events").parse().expect("number");
    assert_eq!(sb.events(), events, "{what}: events");

    let role = match sb.role() {
        DeviceRole::Active(slot) => Value::from(slot),
        DeviceRole::Spare => Value::from("spare"),
        other => panic!("{what}: unexpected role {other:?}"),
    };
    assert_eq!(role, examine["role"], "{what}: role");

    assert_eq!(Value::from(sb.data_offset_sectors()), examine["data_offset_sectors"], "{what}: data offset");

    let state = examine["state"].as_str().expect("state");
    assert_eq!(sb.is_clean(), state == "clean", "{what}: state {state}");

    // "Checksum : 6c0263a7 - correct"
    let checksum_line = examine_line(member, "Checksum").expect("checksum line");
    assert!(checksum_line.ends_with("- correct"), "{what}: mdadm said {checksum_line}");
    // mdadm prints `%x`, without leading zeros.
    let stored_hex = checksum_line.split(' ').next().unwrap_or_default();
    let stored = u32::from_str_radix(stored_hex, 16).expect("hex checksum");

    // Re-encoding reproduces the on-disk bytes exactly.
    let encoded = sb.encode();
    let start = offset as usize;
    assert_eq!(encoded, member.bytes[start..start + encoded.len()], "{what}: re-encode");

    match &sb {
        Superblock::V1(sb1) => {
            assert_eq!(sb1.sb_csum, stored, "{what}: stored checksum");
            assert_eq!(sb1.compute_checksum(), stored, "{what}: computed checksum");
            let feature_map = format!("{:#x}", sb1.feature_map.0);
            assert_eq!(Value::from(feature_map), examine["feature_map"], "{what}: feature map");
            assert_eq!(Value::from(sb1.super_offset_sectors), examine["super_offset_sectors"], "{what}: super offset");
            assert_eq!(sb1.super_offset_sectors * 512, offset, "{what}: found where it says");
            assert_eq!(Value::from(sb1.data_size_sectors), examine["avail_dev_size_sectors"], "{what}: avail dev size");
            let device_uuid = examine["device_uuid"].as_str().expect("device uuid");
            assert_eq!(sb1.device_uuid().to_string(), device_uuid, "{what}: device uuid");
            let name = examine_line(member, "Name").expect("name line");
            assert!(name.starts_with(&sb1.name()), "{what}: name {name} vs {}", sb1.name());
        }
        Superblock::V090(sb0) => {
            assert_eq!(sb0.sb_csum, stored, "{what}: stored checksum");
            assert_eq!(sb0.compute_checksum(), stored, "{what}: computed checksum");
            let used = examine_line(member, "Used Dev Size").expect("used dev size");
            let kib: u32 = used.split(' ').next().and_then(|s| s.parse().ok()).expect("KiB");
            assert_eq!(sb0.size_kib, kib, "{what}: size");
        }
    }

    if let Some(chunk) = examine["chunk_size"].as_str() {
        let kib: u32 = chunk.trim_end_matches('K').parse().expect("chunk in K");
        assert_eq!(sb.shape().chunk_sectors, kib * 2, "{what}: chunk");
    }
}

fn candidates(array: &Array) -> Vec<Candidate> {
    array
        .members
        .iter()
        .map(|member| Candidate {
            label: member.image.clone(),
            superblock: superblock_of(member).0,
            device_size_bytes: member.bytes.len() as u64,
        })
        .collect()
}

/// Assembles as mdadm did: same members in the same roles, stale ones left out, the same
/// array size.
fn check_assembly(array: &Array) {
    let candidates = candidates(array);
    let assembly = assemble(&candidates, &AssembleOptions::default());
    let plan = assembly.plan.as_ref().unwrap_or_else(|| panic!("{}: {:?}", array.name, assembly.decision));

    let roles: Vec<Value> =
        plan.members.iter().map(|m| m.map_or(Value::Null, |index| Value::from(candidates[index].label.clone()))).collect();
    assert_eq!(Value::from(roles), array.manifest["role_order"], "{}: role order", array.name);

    let degraded = array.manifest["role_order"].as_array().is_some_and(|r| r.iter().any(Value::is_null));
    let expected = if degraded { Decision::RunDegraded } else { Decision::Run };
    assert_eq!(assembly.decision, expected, "{}", array.name);

    for (index, member) in array.members.iter().enumerate() {
        let used = plan.members.contains(&Some(index)) || plan.spares.contains(&index);
        assert_eq!(Value::from(used), member.manifest["in_assembled_array"], "{}/{}: used in assembly", array.name, member.image);
    }

    let member_sizes: Vec<u64> = plan
        .members
        .iter()
        .flatten()
        .map(|&index| candidates[index].superblock.member_data_size_sectors(candidates[index].device_size_bytes))
        .collect();
    let size = plan.shape.array_size_sectors(&member_sizes).expect("array size");
    assert_eq!(Value::from(size * 512), array.manifest["array_size_bytes"], "{}: array size", array.name);
}

#[test]
fn named_arrays_match_mdadm_examine() {
    if !have_corpus("metadata_corpus::named_arrays_match_mdadm_examine") {
        return;
    }
    for name in ["raid4-4", "raid5-bitmap-4", "raid1-md0.90-2", "raid5-md1.0-4"] {
        let array = load_array(name);
        for member in &array.members {
            check_member_against_examine(&array, member);
        }
        check_assembly(&array);
    }
}

#[test]
fn every_corpus_array_decodes_and_assembles() {
    if !have_corpus("metadata_corpus::every_corpus_array_decodes_and_assembles") {
        return;
    }
    let names = all_array_names();
    assert!(!names.is_empty(), "no arrays under {}", corpus_dir().display());
    for name in names {
        let array = load_array(&name);
        for member in &array.members {
            check_member_against_examine(&array, member);
        }
        check_assembly(&array);
    }
}

#[test]
fn internal_bitmap_of_raid5_bitmap_4() {
    if !have_corpus("metadata_corpus::internal_bitmap_of_raid5_bitmap_4") {
        return;
    }
    let array = load_array("raid5-bitmap-4");
    for member in &array.members {
        let (sb, offset) = superblock_of(member);
        let bitmap_offset = sb.bitmap_offset_bytes(offset).expect("bitmap present") as usize;
        // examine: "Internal Bitmap : 8 sectors from superblock"
        assert_eq!(bitmap_offset, 4096 + 8 * 512);
        let bytes = &member.bytes[bitmap_offset..];
        let bitmap = BitmapSuperblock::decode(bytes).expect("bitmap superblock");
        assert_eq!(bitmap.encode().as_slice(), &bytes[..256], "bitmap re-encode");
        assert_eq!(bitmap.uuid, sb.array_uuid().0);
        assert_eq!(bitmap.version, 4);
        assert_eq!(bitmap.events, sb.events());
        assert_eq!(bitmap.sync_size_sectors, sb.shape().component_size_sectors);
        let bits = WriteIntentBits::decode(&bitmap, &bytes[256..]).expect("bits");
        assert_eq!(bits.chunk_count(), bitmap.chunk_count());
        assert_eq!(bits.encode(), &bytes[256..256 + bits.encode().len()]);
        // The array was clean when imaged: no chunk may be dirty.
        assert_eq!(bits.dirty_chunks().count(), 0, "{}", member.image);
    }
}

#[test]
fn stale_members_of_degraded_arrays_are_named() {
    if !have_corpus("metadata_corpus::stale_members_of_degraded_arrays_are_named") {
        return;
    }
    let array = load_array("raid6-2missing-5");
    let candidates = candidates(&array);
    let assembly = assemble(&candidates, &AssembleOptions::default());
    let plan = assembly.plan.expect("plan");
    let stale: Vec<&str> = plan.stale().map(|i| candidates[i].label.as_str()).collect();
    assert_eq!(stale, vec!["disk1.img.zst", "disk3.img.zst"]);
    assert_eq!(plan.missing_roles, vec![1, 3]);

    // Drop one more member: raid6 of 5 cannot lose three.
    let fewer: Vec<Candidate> = candidates.iter().filter(|c| c.label != "disk4.img.zst").cloned().collect();
    let assembly = assemble(&fewer, &AssembleOptions::default());
    let Decision::Refuse { reason } = assembly.decision else { panic!("must refuse") };
    assert!(reason.contains("need 3 of 5 for raid6, found 2"), "{reason}");
    assert!(reason.contains("--force"), "{reason}");

    // --force brings back the newest stale member (disk3, events 22); disk4 was active at the
    // last update, so starting without it also needs --run.
    let forced = assemble(&fewer, &AssembleOptions { force: true, ..Default::default() });
    let Decision::Refuse { reason } = forced.decision else { panic!("must refuse without --run") };
    assert!(reason.contains("roles 4") && reason.contains("--run"), "{reason}");
    let forced = assemble(&fewer, &AssembleOptions { force: true, run: true, ..Default::default() });
    assert_eq!(forced.decision, Decision::RunDegraded);
    let plan = forced.plan.expect("plan");
    let forced_labels: Vec<&str> = plan.forced.iter().map(|i| fewer[*i].label.as_str()).collect();
    assert_eq!(forced_labels, vec!["disk3.img.zst"]);
}

#[test]
fn members_of_two_arrays_are_refused() {
    if !have_corpus("metadata_corpus::members_of_two_arrays_are_refused") {
        return;
    }
    let mut mixed = candidates(&load_array("raid4-4"));
    mixed.extend(candidates(&load_array("raid1-2")));
    let assembly = assemble(&mixed, &AssembleOptions::default());
    let Decision::Refuse { reason } = &assembly.decision else { panic!("must refuse") };
    assert!(reason.contains("members from 2 different arrays"), "{reason}");
    assert_eq!(assembly.groups.len(), 2);

    let chosen = AssembleOptions { array_uuid: Some(assembly.groups[1].uuid), ..Default::default() };
    let assembly = assemble(&mixed, &chosen);
    assert_eq!(assembly.decision, Decision::Run);
}

#[test]
fn forgotten_member_needs_run() {
    if !have_corpus("metadata_corpus::forgotten_member_needs_run") {
        return;
    }
    let all = candidates(&load_array("raid5-left-symmetric-4"));
    let three: Vec<Candidate> = all.iter().filter(|c| c.label != "disk2.img.zst").cloned().collect();
    let Decision::Refuse { reason } = assemble(&three, &AssembleOptions::default()).decision else { panic!("must refuse without --run") };
    assert!(reason.contains("roles 2") && reason.contains("--run"), "{reason}");
    let run = AssembleOptions { run: true, ..Default::default() };
    assert_eq!(assemble(&three, &run).decision, Decision::RunDegraded);
}
