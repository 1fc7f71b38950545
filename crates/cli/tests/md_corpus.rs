//! Every array in ../shared/md-corpus (real arrays made by Linux md + mdadm) through the
//! `uraid` binary: `examine` agrees with mdadm's examine, `read` returns exactly the array's
//! bytes (sha256 from the manifest), degraded arrays included; bad input is refused with a
//! clear error and no member file changes.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn uraid(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uraid")).args(args).output().expect("run uraid")
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn file_sha(p: &Path) -> String {
    sha256_hex(&std::fs::read(p).unwrap())
}

/// Decompresses an array's member images into `into`, returning paths in manifest order.
fn unpack(array_dir: &Path, images: &[String], into: &Path) -> Vec<PathBuf> {
    images
        .iter()
        .map(|img| {
            let out = into.join(img.trim_end_matches(".zst"));
            let st = Command::new("zstd")
                .args(["-q", "-d", "-f"])
                .arg(array_dir.join(img))
                .arg("-o")
                .arg(&out)
                .status()
                .expect("zstd is installed by scripts/setup");
            assert!(st.success(), "zstd failed on {img}");
            out
        })
        .collect()
}

struct Unpacked {
    _tmp: tempfile::TempDir,
    manifest: Value,
    paths: Vec<PathBuf>,
}

/// Every corpus array unpacked, or `None` when the corpus is missing (the test is then
/// recorded as skipped, or fails under CI).
fn arrays(test: &str) -> Option<Vec<Unpacked>> {
    let dir = uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS, test)?;
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let all = index["arrays"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let adir = dir.join(a["dir"].as_str().unwrap());
            let manifest: Value = serde_json::from_slice(&std::fs::read(adir.join("manifest.json")).unwrap()).unwrap();
            let images: Vec<String> =
                manifest["members"].as_array().unwrap().iter().map(|m| m["image"].as_str().unwrap().to_string()).collect();
            let tmp = tempfile::tempdir().unwrap();
            let paths = unpack(&adir, &images, tmp.path());
            Unpacked { _tmp: tmp, manifest, paths }
        })
        .collect();
    Some(all)
}

fn strs(paths: &[PathBuf]) -> Vec<&str> {
    paths.iter().map(|p| p.to_str().unwrap()).collect()
}

#[test]
fn examine_matches_mdadm_and_read_matches_sha256_for_every_corpus_array() {
    let Some(all) = arrays("md_corpus::examine_matches_mdadm_and_read_matches_sha256_for_every_corpus_array") else { return };
    assert!(!all.is_empty(), "the corpus index lists no arrays");
    for a in &all {
        let name = a.manifest["name"].as_str().unwrap();
        let before: Vec<String> = a.paths.iter().map(|p| file_sha(p)).collect();

        // examine, member by member, against mdadm's --examine in the manifest.
        let mut args = vec!["examine", "--json"];
        args.extend(strs(&a.paths));
        let out = uraid(&args);
        let examined: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{name}: examine json: {e}"));
        for (m, e) in a.manifest["members"].as_array().unwrap().iter().zip(examined.as_array().unwrap()) {
            let x = &m["examine"];
            let ctx = format!("{name} {}", m["image"]);
            assert_eq!(e["has_superblock"].as_bool(), x["has_superblock"].as_bool(), "{ctx}");
            if x["has_superblock"].as_bool() != Some(true) {
                continue;
            }
            assert_eq!(e["version"].as_str(), x["version"].as_str(), "{ctx} version");
            // mdadm appends " (local to host …)" to 0.90 uuids.
            let uuid = x["array_uuid"].as_str().map(|u| u.split(' ').next().unwrap_or(u));
            assert_eq!(e["array_uuid"].as_str(), uuid, "{ctx} uuid");
            assert_eq!(e["events"].as_u64().map(|v| v.to_string()).as_deref(), x["events"].as_str(), "{ctx} events");
            assert_eq!(e["checksum_correct"].as_bool(), Some(true), "{ctx} checksum");
            assert_eq!(e["state"].as_str(), x["state"].as_str(), "{ctx} state");
            if let Some(role) = x["role"].as_u64() {
                assert_eq!(e["role"].as_str(), Some(format!("Active device {role}").as_str()), "{ctx} role");
            }
            if let Some(d) = x["data_offset_sectors"].as_u64() {
                assert_eq!(e["data_offset_sectors"].as_u64(), Some(d), "{ctx} data offset");
            }
            if let Some(fm) = x["feature_map"].as_str() {
                assert_eq!(e["feature_map"].as_str(), Some(fm), "{ctx} feature map");
            }
            if let Some(du) = x["device_uuid"].as_str() {
                assert_eq!(e["device_uuid"].as_str(), Some(du), "{ctx} device uuid");
            }
            if let Some(c) = x["chunk_size"].as_str() {
                assert_eq!(e["chunk_size_kib"].as_u64().map(|k| format!("{k}K")).as_deref(), Some(c), "{ctx} chunk");
            }
        }

        // read: the whole array, byte-exact, degraded ones reconstructed.
        let mut args = vec!["read"];
        args.extend(strs(&a.paths));
        let out = uraid(&args);
        assert!(out.status.success(), "{name}: read failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout.len() as u64, a.manifest["array_size_bytes"].as_u64().unwrap(), "{name}: size");
        assert_eq!(sha256_hex(&out.stdout), a.manifest["sha256"].as_str().unwrap(), "{name}: sha256");

        // A range read agrees with the whole.
        let (off, len) = (12345u64, 200_000u64);
        let out = uraid(&[&["read", "--offset", &off.to_string(), "--length", &len.to_string()][..], &strs(&a.paths)].concat());
        let whole = uraid(&[&["read"][..], &strs(&a.paths)].concat()).stdout;
        assert_eq!(out.stdout, whole[off as usize..(off + len) as usize], "{name}: range read");

        let after: Vec<String> = a.paths.iter().map(|p| file_sha(p)).collect();
        assert_eq!(before, after, "{name}: a member changed");
    }
    println!("checked {} corpus arrays", all.len());
}

/// The first array of a given level with all members in sync.
fn pick<'a>(all: &'a [Unpacked], level: &str) -> Option<&'a Unpacked> {
    all.iter().find(|a| a.manifest["level"] == level && a.manifest["scenario"] == "plain")
}

fn assert_refused(args: &[&str], paths: &[PathBuf], expect: &str) {
    let before: Vec<String> = paths.iter().map(|p| file_sha(p)).collect();
    let out = uraid(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(err.to_lowercase().contains(&expect.to_lowercase()), "{args:?}: stderr {err:?} lacks {expect:?}");
    let after: Vec<String> = paths.iter().map(|p| file_sha(p)).collect();
    assert_eq!(before, after, "a member changed");
}

#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let Some(all) = arrays("md_corpus::bad_input_is_refused_clearly_and_changes_nothing") else { return };
    let (r5, r6) = (pick(&all, "raid5").expect("the corpus has a RAID5"), pick(&all, "raid6").expect("the corpus has a RAID6"));

    // Shuffled order still assembles by role.
    let mut shuffled = r5.paths.clone();
    shuffled.reverse();
    let out = uraid(&[&["read"][..], &strs(&shuffled)].concat());
    assert!(out.status.success());
    assert_eq!(sha256_hex(&out.stdout), r5.manifest["sha256"].as_str().unwrap());

    // Members of two arrays mixed.
    let mut mixed = r5.paths[..3].to_vec();
    mixed.push(r6.paths[0].clone());
    assert_refused(&[&["read"][..], &strs(&mixed)].concat(), &mixed, "array");

    // Too many members missing: RAID5 with two of four.
    let two = r5.paths[..2].to_vec();
    assert_refused(&[&["read", "--run"][..], &strs(&two)].concat(), &two, "too few");

    // A flipped byte in a superblock: the checksum error is named, by examine and by read.
    let tmp = tempfile::tempdir().unwrap();
    let copies: Vec<PathBuf> = r5
        .paths
        .iter()
        .map(|p| {
            let c = tmp.path().join(p.file_name().unwrap());
            std::fs::copy(p, &c).unwrap();
            c
        })
        .collect();
    let mut bytes = std::fs::read(&copies[1]).unwrap();
    bytes[4096 + 40] ^= 0x20; // inside the 1.2 superblock (set_name)
    std::fs::write(&copies[1], &bytes).unwrap();
    assert_refused(&["examine", copies[1].to_str().unwrap()], &copies, "checksum mismatch");
    assert_refused(&[&["read"][..], &strs(&copies)].concat(), &copies, "checksum mismatch");

    // A truncated member: too small for the data its superblock describes.
    let copies2: Vec<PathBuf> = r5
        .paths
        .iter()
        .map(|p| {
            let c = tmp.path().join(format!("t-{}", p.file_name().unwrap().to_str().unwrap()));
            std::fs::copy(p, &c).unwrap();
            c
        })
        .collect();
    let f = std::fs::OpenOptions::new().write(true).open(&copies2[2]).unwrap();
    f.set_len(8 * 1024 * 1024).unwrap();
    drop(f);
    assert_refused(&[&["read"][..], &strs(&copies2)].concat(), &copies2, "small");

    // Out-of-range reads.
    let size = r5.manifest["array_size_bytes"].as_u64().unwrap();
    assert_refused(
        &[&["read", "--offset", &(size - 10).to_string(), "--length", "11"][..], &strs(&r5.paths)].concat(),
        &r5.paths,
        "past the array end",
    );

    // A file with no superblock at all.
    let blank = tmp.path().join("blank.img");
    std::fs::write(&blank, vec![0u8; 1 << 20]).unwrap();
    assert_refused(&["examine", blank.to_str().unwrap()], std::slice::from_ref(&blank), "no md superblock");
}

/// Each array of the reshape corpus, unpacked: its folder, manifest, the temporary folder
/// holding the images (kept while in use), and the images in role order.
fn reshape_corpus(dir: &Path) -> Vec<(PathBuf, Value, tempfile::TempDir, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let adir = entry.unwrap().path();
        let Ok(raw) = std::fs::read(adir.join("manifest.json")) else { continue };
        let manifest: Value = serde_json::from_slice(&raw).unwrap();
        let images: Vec<String> = manifest["role_order"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        let tmp = tempfile::tempdir().unwrap();
        let paths = unpack(&adir, &images, tmp.path());
        out.push((adir, manifest, tmp, paths));
    }
    out
}

/// Arrays md left in the middle of a reshape (../shared/md-corpus-reshape): `uraid read`
/// returns the content below the logical size byte-exact (the moved part from the new
/// shape at the new data offset, the rest from the old shape), the array's size while
/// parked; a writable open is refused with a clear error and no member changes.
#[test]
fn arrays_md_left_mid_reshape_read_byte_exact_and_writes_are_refused() {
    let Some(dir) = uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS_RESHAPE, "md_corpus::arrays_md_left_mid_reshape") else {
        return;
    };
    let mut seen = 0;
    for (_, manifest, _tmp, paths) in reshape_corpus(&dir) {
        let name = manifest["name"].as_str().unwrap();
        let before: Vec<String> = paths.iter().map(|p| file_sha(p)).collect();
        let out = uraid(&[&["read"][..], &strs(&paths)].concat());
        assert!(out.status.success(), "{name}: read failed: {}", String::from_utf8_lossy(&out.stderr));
        let logical = manifest["logical_size_bytes"].as_u64().unwrap() as usize;
        assert_eq!(out.stdout.len() as u64, manifest["size_while_parked_bytes"].as_u64().unwrap(), "{name}: array size");
        assert_eq!(sha256_hex(&out.stdout[..logical]), manifest["sha256_logical"].as_str().unwrap(), "{name}: content");
        // examine shows the reshape as mdadm does.
        let out = uraid(&["examine", "--json", paths[0].to_str().unwrap()]);
        let ex: Value = serde_json::from_slice(&out.stdout).unwrap();
        let r = &ex[0]["reshape"];
        assert_eq!(r["position_sectors"], manifest["reshape"]["position_sectors"], "{name}: {ex}");
        assert_eq!(r["new_offset_sectors"], manifest["reshape"]["new_offset_sectors"], "{name}: {ex}");
        assert_eq!(r["delta_devices"], manifest["delta_disks"], "{name}: {ex}");
        // Writing would need md's checkpoint rule: refused, saying what to do.
        let out = Command::new(env!("CARGO_BIN_EXE_uraid"))
            .args([&["write", "--offset", "0"][..], &strs(&paths)].concat())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("reshape") && err.contains("mdadm"), "{name}: {err}");
        let after: Vec<String> = paths.iter().map(|p| file_sha(p)).collect();
        assert_eq!(before, after, "{name}: a member changed");
        seen += 1;
    }
    assert!(seen >= 2, "the reshape corpus should hold at least two arrays");
}

/// uraid takes over md's parked reshapes: it moves part of what is left and stops (the array
/// still reads right, from both shapes), then finishes, and the result is byte for byte what
/// md made of the same images (`finish-run.json`: md finishing them in the VM).
#[test]
fn arrays_md_left_mid_reshape_are_continued_to_mds_own_result() {
    let Some(dir) = uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS_RESHAPE, "md_corpus::arrays_md_left_mid_reshape_continued")
    else {
        return;
    };
    let mut seen = 0;
    for (adir, manifest, _tmp, paths) in reshape_corpus(&dir) {
        let finish: Value = serde_json::from_slice(&std::fs::read(adir.join("finish-run.json")).unwrap()).unwrap();
        let name = manifest["name"].as_str().unwrap();
        let logical = manifest["logical_size_bytes"].as_u64().unwrap() as usize;
        let md_position = manifest["reshape"]["position_sectors"].as_u64().unwrap();
        let total = finish["result"]["size_bytes"].as_u64().unwrap() / 512;
        let park = md_position + (total - md_position) / 3;
        let out = uraid(&[&["grow", "--continue", "--json", "--sync-max", &park.to_string()][..], &strs(&paths)].concat());
        assert!(out.status.success(), "{name}: grow failed: {}", String::from_utf8_lossy(&out.stderr));
        let parked: Value = serde_json::from_slice(&out.stdout).unwrap();
        let at = parked["position_sectors"].as_u64().unwrap();
        assert!(parked["finished"] == false && at >= park && at < total, "{name}: {parked}");
        let out = uraid(&[&["examine", "--json"][..], &strs(&paths)].concat());
        let ex: Value = serde_json::from_slice(&out.stdout).unwrap();
        for m in ex.as_array().unwrap() {
            assert_eq!(m["reshape"]["position_sectors"].as_u64(), Some(at), "{name}: the stop is recorded on every member: {m}");
        }
        let out = uraid(&[&["read"][..], &strs(&paths)].concat());
        assert_eq!(sha256_hex(&out.stdout[..logical]), manifest["sha256_logical"].as_str().unwrap(), "{name}: content while parked");
        let out = uraid(&[&["grow", "--continue", "--json"][..], &strs(&paths)].concat());
        assert!(out.status.success(), "{name}: grow failed: {}", String::from_utf8_lossy(&out.stderr));
        let done: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(done["finished"], true, "{name}: {done}");
        let out = uraid(&[&["read"][..], &strs(&paths)].concat());
        assert!(out.status.success(), "{name}: the reshaped array assembles: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout.len() as u64, finish["result"]["size_bytes"].as_u64().unwrap(), "{name}: final size");
        assert_eq!(sha256_hex(&out.stdout), finish["result"]["sha256"].as_str().unwrap(), "{name}: md's own result");
        let out = uraid(&[&["examine", "--json"][..], &strs(&paths)].concat());
        let ex: Value = serde_json::from_slice(&out.stdout).unwrap();
        let md_after = finish["examine_after"][0]["data_offset_sectors"].as_u64().unwrap();
        for m in ex.as_array().unwrap() {
            assert!(m["reshape"].is_null(), "{name}: no reshape recorded after the end: {m}");
            assert_eq!(m["data_offset_sectors"].as_u64(), Some(md_after), "{name}: data offset as md leaves it: {m}");
        }
        seen += 1;
    }
    assert!(seen >= 2, "the reshape corpus should hold at least two arrays");
}

/// md's own 0.90 superblocks, read as their v1 view and written back the way uraid writes
/// a 0.90 array's superblocks during a reshape (`Superblock090::synced_from_v1`), come out
/// byte-exact: uraid renumbers, counts and flags the descriptors as md's `super_90_sync`.
#[test]
fn mds_090_superblocks_are_written_back_byte_exact() {
    use uraid_core::metadata::sb090::{DiskDescriptor090, Superblock090};
    use uraid_core::metadata::{sb090_offset_sectors, DeviceRole};
    let Some(all) = arrays("md_corpus::mds_090_superblocks_are_written_back_byte_exact") else { return };
    let mut checked = 0;
    for a in all.iter().filter(|a| a.manifest["metadata_version"].as_str() == Some("0.90")) {
        let superblocks: Vec<Superblock090> = a
            .paths
            .iter()
            .map(|p| {
                let img = std::fs::read(p).unwrap();
                let at = sb090_offset_sectors(img.len() as u64).unwrap() as usize * 512;
                Superblock090::decode(&img[at..at + 4096]).expect("md's 0.90 superblock")
            })
            .collect();
        // Every device md held, in sync unless md recorded it active without SYNC.
        let present: Vec<(u32, bool)> = superblocks
            .iter()
            .filter(|sb| sb.role_of_this_device() != DeviceRole::Faulty)
            .map(|sb| {
                (sb.this_disk.number, sb.this_disk.state & DiskDescriptor090::STATE_SYNC != 0 || sb.raid_disks <= sb.this_disk.number)
            })
            .collect();
        for (sb, p) in superblocks.iter().zip(&a.paths) {
            let again = sb.synced_from_v1(&sb.v1_view(1000), &present);
            assert!(again.encode() == sb.encode(), "{}: written back differently:\n{again:?}\nmd wrote\n{sb:?}", p.display());
            checked += 1;
        }
    }
    assert!(checked >= 3, "the corpus has a 0.90 array of 3 devices; checked {checked}");
}
