//! `uraid grow`: reshapes started and continued offline keep the array's content through
//! every change (and through a stop half-way), and every refusal leaves the members as they
//! were. Real md's view of the same reshapes is checked by scripts/interop (grow-* cases).

use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Output;
use std::time::Duration;
use uraid_testkit::process::{describe, run_limited_in};

const BIN: &str = env!("CARGO_BIN_EXE_uraid");
/// A hang guard, never a speed limit.
const HANG: Duration = Duration::from_secs(300);

fn run(dir: &Path, args: &[&str]) -> Output {
    run_limited_in(BIN, args, &[("URAID_RUN_DIR", &dir.join("run"))], Some(dir), HANG)
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let out = run(dir, args);
    assert!(out.status.success(), "{}", describe("uraid", args, &out));
    out
}

fn with_devs<'a>(args: &[&'a str], devs: &'a [String]) -> Vec<&'a str> {
    args.iter().copied().chain(devs.iter().map(String::as_str)).collect()
}

/// Creates an array of `level` with `n` members and one spare, `extra` create options, and
/// fills it with seeded bytes; returns the device names and the content.
/// (A RAID0 gets no spare: md has no use for one.)
fn filled(dir: &Path, level: &str, n: usize, extra: &[&str]) -> (Vec<String>, Vec<u8>) {
    let spares = usize::from(level != "0");
    let devs: Vec<String> = (0..n + spares).map(|i| format!("d{i}")).collect();
    let n_text = n.to_string();
    let spares_text = spares.to_string();
    let mut args = vec!["create", "-f", "-l", level, "-n", &n_text, "-x", &spares_text, "--size", "12M"];
    if level != "1" {
        args.extend_from_slice(&["-c", "64K"]);
    }
    args.extend_from_slice(extra);
    ok(dir, &with_devs(&args, &devs));
    let size = ok(dir, &with_devs(&["read"], &devs)).stdout.len();
    let content = uraid_parity::testdata::Prng::new(size as u64).bytes(size);
    let path = dir.join("content");
    std::fs::write(&path, &content).unwrap();
    let out = std::process::Command::new(BIN)
        .args(with_devs(&["write", "-q"], &devs))
        .current_dir(dir)
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (devs, content)
}

fn read_prefix(dir: &Path, devs: &[String], len: usize) -> Vec<u8> {
    let out = ok(dir, &with_devs(&["read"], devs));
    assert!(out.stdout.len() >= len, "the array shrank: {} < {len}", out.stdout.len());
    out.stdout[..len].to_vec()
}

fn sums(dir: &Path, devs: &[String]) -> Vec<String> {
    devs.iter().map(|d| format!("{:x}", Sha256::digest(std::fs::read(dir.join(d)).unwrap()))).collect()
}

/// `args` on `devs` fails with `needle` in its message and changes no member.
fn refused(dir: &Path, devs: &[String], args: &[&str], needle: &str) {
    let before = sums(dir, devs);
    let out = run(dir, &with_devs(args, devs));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(needle), "{}", describe("uraid", args, &out));
    assert_eq!(sums(dir, devs), before, "{args:?} changed a member");
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn every_change_keeps_the_content_even_when_stopped_half_way() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &[]);
    let before = ok(dir, &with_devs(&["read"], &devs)).stdout.len();
    // 3 -> 4 members, stopped a third of the way and recorded there, then continued.
    let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", "4", "--sync-max", "20000"], &devs)));
    assert_eq!(parked["finished"], false, "{parked}");
    assert!(parked["position_sectors"].as_u64().unwrap() >= 20000, "{parked}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content while parked mid-reshape");
    let out = run(dir, &with_devs(&["grow", "-n", "5"], &devs));
    assert!(!out.status.success(), "a second reshape must wait for the first: {}", describe("uraid", &[], &out));
    let done = json(&ok(dir, &with_devs(&["grow", "--json", "--continue"], &devs)));
    assert_eq!(done["finished"], true, "{done}");
    let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(after.len(), before / 2 * 3, "RAID5 3 -> 4: three data members instead of two");
    assert_eq!(&after[..content.len()], &content[..], "content after the grow");
    assert!(after[content.len()..].iter().all(|&b| b == 0), "the new space reads as zeros (md's rule)");
    // A chunk change, then a layout change, on the grown array.
    ok(dir, &with_devs(&["grow", "-q", "--chunk", "256K"], &devs));
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content after the chunk change");
    ok(dir, &with_devs(&["grow", "-q", "--layout", "right-asymmetric"], &devs));
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content after the layout change");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert_eq!(ex[0]["chunk_size_kib"], 256, "{ex}");
    assert_eq!(ex[0]["layout"], "right-asymmetric", "{ex}");
}

/// md's shrink: refused until the array is cut to its new capacity (`--array-size`), then
/// run backwards; the content up to the cut stays, the member that leaves becomes a spare,
/// and the smaller array survives the loss of any member.
#[test]
fn a_shrink_needs_the_array_cut_first_then_keeps_the_content_up_to_the_cut() {
    for (level, n) in [("5", 4), ("6", 5)] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (devs, content) = filled(dir, level, n, &[]);
        let fewer = (n - 1).to_string();
        let before = sums(dir, &devs);
        let out = run(dir, &with_devs(&["grow", "-n", &fewer], &devs));
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!out.status.success() && err.contains("--array-size"), "{}", describe("uraid", &[], &out));
        assert_eq!(sums(dir, &devs), before, "a refused shrink changed a member");
        // The capacity the refusal names, in KiB.
        let kib: u64 = err.split("--array-size ").nth(1).and_then(|t| t.split('K').next()).and_then(|t| t.parse().ok()).expect("a size");
        let too_much = format!("{}K", kib + 64);
        let out = run(dir, &with_devs(&["grow", "-n", &fewer, "--array-size", &too_much], &devs));
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("more than"), "{}", describe("uraid", &[], &out));
        assert_eq!(sums(dir, &devs), before, "a refused shrink changed a member");
        // Stopped a third of the way, then continued.
        let cut = format!("{kib}K");
        let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", &fewer, "--array-size", &cut, "--sync-max", "8192"], &devs)));
        assert_eq!(parked["finished"], false, "{parked}");
        let kept = (kib * 1024) as usize;
        assert_eq!(read_prefix(dir, &devs, kept), content[..kept], "RAID{level}: content while parked mid-shrink");
        let done = json(&ok(dir, &with_devs(&["grow", "--json", "--continue"], &devs)));
        assert_eq!(done["finished"], true, "{done}");
        let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
        assert_eq!(after.len(), kept, "RAID{level}: the array is its new capacity");
        assert!(after == content[..kept], "RAID{level}: content after the shrink");
        let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
        let roles: Vec<String> = ex.as_array().unwrap().iter().map(|e| e["role"].to_string()).collect();
        assert_eq!(roles.iter().filter(|r| r.contains("spare")).count(), 2, "RAID{level}: the member that left and the spare: {roles:?}");
        for lost in 0..n - 1 {
            let left: Vec<String> = devs.iter().enumerate().filter(|(i, _)| *i != lost).map(|(_, d)| d.clone()).collect();
            assert!(ok(dir, &with_devs(&["read", "--run"], &left)).stdout == after, "RAID{level}: without member {lost}");
        }
    }
}

/// A RAID0 gets a member more as mdadm gives it one: taken over as RAID4 (parity missing),
/// reshaped with the new device in the missing role, taken back as RAID0; stopped part-way,
/// it is a degraded RAID4 mid-reshape that `--continue` finishes and `--level 0` takes back.
#[test]
fn a_raid0_gets_a_member_more_through_raid4_as_md_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut devs, content) = filled(dir, "0", 3, &[]);
    // A larger new disk: the RAID0 stays one zone (md's takeover gives every member the
    // RAID4's used size).
    std::fs::write(dir.join("n3"), vec![0u8; 16 << 20]).unwrap();
    std::fs::write(dir.join("small"), vec![0u8; 4 << 20]).unwrap();
    let before = sums(dir, &devs);
    for (args, needle) in [
        (&["grow", "-n", "4"][..], "needs 1 new device"),
        // Refused before the takeover: the RAID0 stays a RAID0, not a RAID4 left half-way.
        (&["grow", "-n", "4", "--add", "small"][..], "a new member of this array needs"),
        (&["grow", "-n", "5", "--add", "n3"][..], "needs 2 new device"),
        (&["grow", "-n", "2", "--add", "n3"][..], "only adds members"),
    ] {
        let out = run(dir, &with_devs(args, &devs));
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(needle), "{}", describe("uraid", args, &out));
        assert_eq!(sums(dir, &devs), before, "{args:?} changed a member");
    }
    assert!(std::fs::read(dir.join("small")).unwrap().iter().all(|&b| b == 0), "the refused new device was written");
    ok(dir, &with_devs(&["grow", "-q", "-n", "4", "--add", "n3"], &devs));
    devs.push("n3".into());
    let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(after.len(), content.len() / 3 * 4, "four data members");
    assert!(after[..content.len()] == content[..], "content after the grow");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert!(ex.as_array().unwrap().iter().all(|e| e["level"] == "raid0" && e["raid_devices"] == 4), "{ex}");

    // Stopped part-way: a RAID4 mid-reshape, continued, then taken back.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut devs, content) = filled(dir, "0", 3, &[]);
    std::fs::write(dir.join("n3"), vec![0u8; 12 << 20]).unwrap();
    let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", "4", "--add", "n3", "--sync-max", "8192"], &devs)));
    assert_eq!(parked["finished"], false, "{parked}");
    devs.push("n3".into());
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert!(ex.as_array().unwrap().iter().all(|e| e["level"] == "raid4"), "parked as md parks it: a RAID4 {ex}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content while parked");
    ok(dir, &with_devs(&["grow", "-q", "--continue"], &devs));
    ok(dir, &with_devs(&["grow", "-q", "--level", "0"], &devs));
    let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert!(after.len() == content.len() / 3 * 4 && after[..content.len()] == content[..], "content after continue and takeover");
}

/// RAID10 near gets members as md adds them (the data moved down one chunk, forwards):
/// stopped part-way and continued, the content stays and the new space reads as zeros;
/// what md refuses, or uraid does not do yet, is refused with what to do.
#[test]
fn a_raid10_near_gets_a_member_more_even_when_stopped_half_way() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "10", 3, &["--layout", "n2"]);
    let before_len = ok(dir, &with_devs(&["read"], &devs)).stdout.len();
    for (args, needle) in [
        (&["grow", "-n", "5"][..], "add them first"),
        (&["grow", "-n", "2"][..], "--array-size"),
        (&["grow", "-n", "4", "--layout", "f2"][..], "far"),
        (&["grow", "-n", "4", "--layout", "n3"][..], "number of copies"),
    ] {
        refused(dir, &devs, args, needle);
    }
    let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", "4", "--sync-max", "6000"], &devs)));
    assert_eq!(parked["finished"], false, "{parked}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content while parked mid-reshape");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert!(ex.as_array().unwrap().iter().all(|e| e["raid_devices"] == 4), "{ex}");
    let done = json(&ok(dir, &with_devs(&["grow", "--json", "--continue"], &devs)));
    assert_eq!(done["finished"], true, "{done}");
    let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(after.len(), before_len / 3 * 4, "RAID10 n2 3 -> 4: two mirrored pairs' worth instead of one and a half");
    assert!(after[..content.len()] == content[..], "content after the grow");
    assert!(after[content.len()..].iter().all(|&b| b == 0), "the new space reads as zeros");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert!(ex.as_array().unwrap().iter().all(|e| e["level"] == "raid10" && e["raid_devices"] == 4), "{ex}");

    // An offset layout (o2) too: each chunk row followed by its copy row.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "10", 3, &["--layout", "o2"]);
    ok(dir, &with_devs(&["grow", "-q", "-n", "4"], &devs));
    let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert!(after.len() > content.len() && after[..content.len()] == content[..], "content after the o2 grow");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, _) = filled(dir, "10", 4, &["--layout", "f2"]);
    refused(dir, &devs, &["grow", "-n", "5"], "far");
}

/// A RAID10 gives up a member as md does: only once the array is cut to fit (--array-size),
/// backwards, the member leaving a spare; stopped part-way and continued, the content up to
/// the cut kept.
#[test]
fn a_raid10_gives_up_a_member_after_the_array_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "10", 4, &["--layout", "n2"]);
    refused(dir, &devs, &["grow", "-n", "3"], "--array-size");
    let cut = "16M";
    let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", "3", "--array-size", cut, "--sync-max", "6000"], &devs)));
    assert_eq!(parked["finished"], false, "{parked}");
    let kept = 16 << 20;
    assert_eq!(read_prefix(dir, &devs, kept), content[..kept], "content up to the cut while parked");
    ok(dir, &with_devs(&["grow", "-q", "--continue"], &devs));
    assert_eq!(read_prefix(dir, &devs, kept), content[..kept], "content up to the cut after the shrink");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    let roles: Vec<&str> = ex.as_array().unwrap().iter().map(|e| e["role"].as_str().unwrap_or("")).collect();
    assert!(ex.as_array().unwrap().iter().all(|e| e["raid_devices"] == 3), "{ex}");
    assert_eq!(roles.iter().filter(|r| r.contains("spare")).count(), 2, "the old spare and the member that left: {roles:?}");
}

/// The other RAID10 reshapes md makes on the same members: another chunk, and a switch
/// between near and offset, each stopped part-way and continued, the content kept.
#[test]
fn a_raid10_changes_its_chunk_and_switches_near_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "10", 4, &["--layout", "n2"]);
    for (change, layout, chunk_kib) in [(&["--chunk", "128K"][..], "near=2", 128), (&["--layout", "o2"][..], "offset=2", 128)] {
        let mut args = vec!["grow", "--json", "--sync-max", "6000"];
        args.extend_from_slice(change);
        let parked = json(&ok(dir, &with_devs(&args, &devs)));
        assert_eq!(parked["finished"], false, "{parked}");
        assert_eq!(read_prefix(dir, &devs, content.len()), content, "{change:?}: content while parked mid-reshape");
        let done = json(&ok(dir, &with_devs(&["grow", "--json", "--continue"], &devs)));
        assert_eq!(done["finished"], true, "{done}");
        let after = ok(dir, &with_devs(&["read"], &devs)).stdout;
        assert!(after == content, "{change:?}: the same content, the same size");
        let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
        for e in ex.as_array().unwrap() {
            assert_eq!((e["layout"].as_str(), e["chunk_size_kib"].as_u64()), (Some(layout), Some(chunk_kib)), "{change:?}: {e}");
        }
    }
}

#[test]
fn refusals_say_what_would_work_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, _) = filled(dir, "6", 4, &[]);
    let cases: [(&[&str], &str); 6] = [
        (&["grow", "-n", "6"], "add them first"),
        (&["grow", "-n", "4"], "nothing to change"),
        (&["grow", "-n", "3"], "at least 4 members"),
        (&["grow", "-n", "5", "--array-size", "1M"], "only truncates an array before a shrink"),
        (&["grow", "--chunk", "96K"], "power of two"),
        (&["grow"], "say what to change"),
    ];
    for (args, needle) in cases {
        let before = sums(dir, &devs);
        let out = run(dir, &with_devs(args, &devs));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: want {needle:?}: {}", describe("uraid", args, &out));
        assert_eq!(sums(dir, &devs), before, "{args:?} changed a member");
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, _) = filled(dir, "1", 2, &[]);
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "-n", "3"], &devs));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("RAID5"), "{}", describe("uraid", &[], &out));
    assert_eq!(sums(dir, &devs), before);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A RAID10's bitmap counts array sectors: another chunk keeps the array; another member
    // count resizes the bitmap with it, as md does.
    let (devs, content) = filled(dir, "10", 4, &["--bitmap", "internal"]);
    ok(dir, &with_devs(&["grow", "-q", "--chunk", "128K"], &devs));
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "RAID10 chunk change with a bitmap");
    ok(dir, &with_devs(&["grow", "-q", "-n", "5"], &devs));
    let whole = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(&whole[..content.len()], &content[..], "RAID10 grow with a bitmap");
    assert!(whole.len() > content.len(), "grown");
}

/// A RAID5 with a write-intent bitmap grows (md's bitmap counts member sectors, which both
/// shapes share): the content stays and the bitmap is there afterwards, clean and as new
/// as the superblock.
#[test]
fn a_raid5_with_a_bitmap_grows_and_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &["--bitmap", "internal", "--bitmap-chunk", "1M"]);
    let parked = json(&ok(dir, &with_devs(&["grow", "--json", "-n", "4", "--sync-max", "6000"], &devs)));
    assert_eq!(parked["finished"], false, "{parked}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content while parked mid-reshape");
    ok(dir, &with_devs(&["grow", "-q", "--continue"], &devs));
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content after the grow");
    use uraid_core::metadata::{BitmapSuperblock, Superblock1, WriteIntentBits};
    for d in &devs {
        let img = std::fs::read(dir.join(d)).unwrap();
        let sb = Superblock1::decode(&img[4096..8192]).expect("v1.2 superblock");
        assert_eq!(sb.raid_disks, 4, "{d}");
        let at = 4096 + sb.bitmap_offset_sectors().expect("the bitmap is kept") as usize * 512;
        let bsb = BitmapSuperblock::decode(&img[at..at + 256]).expect("bitmap superblock");
        assert_eq!(bsb.events, sb.events, "{d}: the bitmap is as new as the superblock");
        let bits = WriteIntentBits::decode(&bsb, &img[at + 256..]).unwrap();
        assert_eq!(bits.dirty_chunks().count(), 0, "{d}: clean after a clean close");
    }
}

#[test]
fn takeovers_keep_the_content_from_raid1_to_raid6_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "1", 2, &[]);
    // RAID1 -> RAID5 (2 members), grown to 3 members in the same command, as mdadm does.
    let out = json(&ok(dir, &with_devs(&["grow", "--json", "--level", "5", "-n", "3"], &devs)));
    assert_eq!(out["finished"], true, "{out}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content as RAID5");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert_eq!((ex[0]["level"].as_str(), ex[0]["raid_devices"].as_u64()), (Some("raid5"), Some(3)), "{ex}");
    // RAID5 -> RAID6 needs a spare for Q: the one it had became the third member.
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "--level", "6"], &devs));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("spare"), "{}", describe("uraid", &[], &out));
    assert_eq!(sums(dir, &devs), before);

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &[]);
    ok(dir, &with_devs(&["grow", "-q", "--level", "6"], &devs));
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert_eq!((ex[0]["level"].as_str(), ex[0]["layout"].as_str()), (Some("raid6"), Some("left-symmetric-6")), "{ex}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content as RAID6");
    // Q was rebuilt on the spare: the array survives losing two members.
    let two_left: Vec<String> = devs[2..].to_vec();
    let out = ok(dir, &with_devs(&["read", "--run"], &two_left));
    assert_eq!(&out.stdout[..content.len()], &content[..], "RAID6 read with two members missing");
    ok(dir, &with_devs(&["grow", "-q", "--level", "5"], &devs));
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content back as RAID5");
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert_eq!(ex[3]["role"].as_str(), Some("spare"), "Q's member is a spare again: {ex}");
}

#[test]
fn raid0_becomes_raid4_or_raid5_degraded_as_md_leaves_it_and_back() {
    for to in ["4", "5"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (devs, content) = filled(dir, "0", 3, &[]);
        ok(dir, &with_devs(&["grow", "-q", "--level", to], &devs));
        let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
        assert_eq!(
            (ex[0]["level"].as_str(), ex[0]["raid_devices"].as_u64()),
            (Some(if to == "4" { "raid4" } else { "raid5" }), Some(4)),
            "{ex}"
        );
        // No spare: the parity member is missing, as md leaves it for a later --add.
        let out = ok(dir, &with_devs(&["read", "--run"], &devs));
        assert_eq!(&out.stdout[..content.len()], &content[..], "content as a degraded RAID{to}");
        // Back to RAID0: md wants the parity member gone, which it is.
        ok(dir, &with_devs(&["grow", "-q", "--level", "0"], &devs));
        let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
        assert_eq!((ex[0]["level"].as_str(), ex[0]["raid_devices"].as_u64()), (Some("raid0"), Some(3)), "{ex}");
        assert_eq!(read_prefix(dir, &devs, content.len()), content, "content back as RAID0");
    }
    // A RAID5 that is not parity-last cannot become a RAID0: refused, nothing written.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, _) = filled(dir, "5", 3, &[]);
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "--level", "0"], &devs));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("parity-last"), "{}", describe("uraid", &[], &out));
    assert_eq!(sums(dir, &devs), before);
}

#[test]
fn raid5_to_raid6_normalised_is_restriped_to_the_rotating_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &[]);
    // mdadm --grow --level 6 --layout normalise: the takeover (Q rebuilt on the spare),
    // then a layout reshape from left-symmetric-6 to left-symmetric.
    ok(dir, &with_devs(&["grow", "-q", "--level", "6", "--layout", "normalise"], &devs));
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert_eq!((ex[0]["level"].as_str(), ex[0]["layout"].as_str()), (Some("raid6"), Some("left-symmetric")), "{ex}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "content as a rotating RAID6");
    let two_left: Vec<String> = devs[..2].to_vec();
    let out = ok(dir, &with_devs(&["read", "--run"], &two_left));
    assert_eq!(&out.stdout[..content.len()], &content[..], "RAID6 read with two members missing");
    // Normalising what is already rotating changes nothing, and says so.
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "--layout", "normalise"], &devs));
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("nothing to change"),
        "{}",
        describe("uraid", &[], &out)
    );
    assert_eq!(sums(dir, &devs), before);
}

#[test]
fn a_reshape_continued_without_a_member_finishes_degraded_and_records_it_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &[]);
    let out = json(&ok(dir, &with_devs(&["grow", "--json", "--sync-max", "0", "-n", "4"], &devs)));
    let third = (out["total_sectors"].as_u64().unwrap() / 3).to_string();
    ok(dir, &with_devs(&["grow", "-q", "--continue", "--sync-max", &third], &devs));
    // Member 1 is gone: without --run the reshape is not continued, and nothing changes.
    let left: Vec<String> = [0, 2, 3].iter().map(|&i| devs[i].clone()).collect();
    let before = sums(dir, &left);
    assert!(!run(dir, &with_devs(&["grow", "--continue"], &left)).status.success());
    assert_eq!(sums(dir, &left), before);
    ok(dir, &with_devs(&["grow", "-q", "--continue", "--run"], &left));
    let out = ok(dir, &with_devs(&["read", "--run"], &left));
    assert_eq!(&out.stdout[..content.len()], &content[..], "content after a degraded reshape");
    // The superblocks say role 1 is missing (md's super_1_sync marks absent members faulty).
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &left)));
    assert_eq!(ex[0]["array_state"].as_str(), Some("A.AA"), "{ex}");
    // Given back, the member is stale and left out: its old-shape data is never read.
    let out = ok(dir, &with_devs(&["read", "--run"], &devs));
    assert_eq!(&out.stdout[..content.len()], &content[..], "content with the stale member given");
}

#[test]
fn size_max_uses_larger_members_and_resyncs_the_new_part() {
    size_max_case(&[]);
}

/// md resizes the write-intent bitmap with the members (`md_bitmap_resize`); so does uraid,
/// and the new part is resynced from it as from the superblocks.
#[test]
fn size_max_resizes_the_write_intent_bitmap() {
    size_max_case(&["--bitmap", "internal", "--bitmap-chunk", "64K"]);
}

/// A RAID10 near layout too (md's `raid10_resize`): the used size rounded as md rounds it,
/// the new part resynced from the old array end (md's RAID10 resync counts array sectors),
/// so any one member can go and every byte still reads; a far layout is refused as md
/// refuses it, nothing written.
#[test]
fn size_max_grows_a_raid10_near_and_refuses_far() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "10", 4, &[]);
    for (i, d) in devs.iter().enumerate() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(dir.join(d)).unwrap();
        f.write_all(&uraid_parity::testdata::Prng::new(i as u64 + 7).bytes(8 << 20)).unwrap();
    }
    ok(dir, &with_devs(&["grow", "-q", "--size", "max"], &devs));
    let whole = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert!(whole.len() > content.len(), "grown: {} <= {}", whole.len(), content.len());
    assert_eq!(&whole[..content.len()], &content[..], "the old content stays where it was");
    for lost in 0..4 {
        let left: Vec<String> = (0..devs.len()).filter(|&i| i != lost).map(|i| devs[i].clone()).collect();
        assert_eq!(ok(dir, &with_devs(&["read", "--run"], &left)).stdout, whole, "without device {lost}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, _) = filled(dir, "10", 3, &["--layout", "f2"]);
    for d in &devs {
        let f = std::fs::OpenOptions::new().append(true).open(dir.join(d)).unwrap();
        f.set_len(f.metadata().unwrap().len() + (8 << 20)).unwrap();
    }
    refused(dir, &devs, &["grow", "--size", "max"], "far layout");
}

fn size_max_case(create: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, create);
    // Nothing larger yet: nothing to change, nothing written.
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "--size", "max"], &devs));
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("nothing to change"),
        "{}",
        describe("uraid", &[], &out)
    );
    assert_eq!(sums(dir, &devs), before);
    // The members are replaced by larger ones (here: the files grow by 8 MiB of whatever
    // the new disks held: never consistent parity until the resync writes it).
    for (i, d) in devs.iter().enumerate() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(dir.join(d)).unwrap();
        f.write_all(&uraid_parity::testdata::Prng::new(i as u64 + 1).bytes(8 << 20)).unwrap();
    }
    // More than the smallest device holds: refused, nothing written.
    let before = sums(dir, &devs);
    assert!(!run(dir, &with_devs(&["grow", "--size", "1G"], &devs)).status.success());
    assert_eq!(sums(dir, &devs), before);
    let out = json(&ok(dir, &with_devs(&["grow", "--json", "--size", "max"], &devs)));
    let (new, old) = (out["size_sectors"].as_u64().unwrap(), out["old_size_sectors"].as_u64().unwrap());
    assert_eq!(new - old, 8 << 11, "{out}");
    let whole = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(whole.len() as u64, 2 * new * 512, "two data members' worth");
    assert_eq!(&whole[..content.len()], &content[..], "the old content stays where it was");
    // The new part was resynced: any one member can be lost and every byte still reads.
    for lost in 0..3 {
        let left: Vec<String> = (0..3).filter(|&i| i != lost).map(|i| devs[i].clone()).collect();
        assert_eq!(ok(dir, &with_devs(&["read", "--run"], &left)).stdout, whole, "without member {lost}");
    }
    if !create.is_empty() {
        // Each member's bitmap counts the new member size.
        for d in &devs {
            let image = std::fs::read(dir.join(d)).unwrap();
            let sb = uraid_core::metadata::Superblock1::decode(&image[4096..8192]).unwrap();
            let at = (4096 + i64::from(sb.bitmap_offset_sectors().expect("a bitmap")) * 512) as usize;
            let bitmap = uraid_core::metadata::BitmapSuperblock::decode(&image[at..at + 256]).unwrap();
            assert_eq!(bitmap.sync_size_sectors, new, "{d}");
            assert_eq!(bitmap.events, sb.events, "{d}");
        }
    }
}

#[test]
fn a_degraded_array_reshapes_degraded_with_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &[]);
    // Member 1 is gone; the spare stays a spare through the chunk change (which takes no
    // new member), then rebuilds the missing role, as md would.
    let left: Vec<String> = [0, 2, 3].iter().map(|&i| devs[i].clone()).collect();
    let before = sums(dir, &left);
    let out = run(dir, &with_devs(&["grow", "--chunk", "128K"], &left));
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--run"), "{}", describe("uraid", &[], &out));
    assert_eq!(sums(dir, &left), before, "a refused grow changed a member");
    ok(dir, &with_devs(&["grow", "-q", "--run", "--chunk", "128K"], &left));
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &left)));
    assert_eq!((ex[0]["chunk_size_kib"].as_u64(), ex[0]["array_state"].as_str()), (Some(128), Some("AAA")), "{ex}");
    let out = ok(dir, &with_devs(&["read", "--run"], &left));
    assert_eq!(&out.stdout[..content.len()], &content[..], "content after a degraded reshape");

    // A shrink too (md allows it): RAID5 4 -> 3 without member 1. The member leaving
    // (role 3) becomes a spare, as md's raid5_finish_reshape leaves it, and is rebuilt into
    // the missing role at once (md's remove_and_add_spares): the smaller array is whole.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 4, &[]);
    let left: Vec<String> = [0, 2, 3, 4].iter().map(|&i| devs[i].clone()).collect();
    let cut = content.len() / 3;
    let cut_arg = format!("{}K", cut / 1024);
    ok(dir, &with_devs(&["grow", "-q", "--run", "-n", "3", "--array-size", &cut_arg], &left));
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &left)));
    let states: Vec<&str> = ex.as_array().unwrap().iter().map(|e| e["array_state"].as_str().unwrap_or("")).collect();
    assert!(ex.as_array().unwrap().iter().all(|e| e["raid_devices"] == 3) && states.iter().all(|s| *s == "AAA"), "{ex}");
    let out = ok(dir, &with_devs(&["read"], &left));
    assert_eq!(&out.stdout[..cut], &content[..cut], "content up to the cut after a degraded shrink");
}

/// A 0.90 array md has just started growing (0.91 superblocks, position 0: nothing moved
/// yet, the spare in role 3): `examine` shows md's reshape rows, `read` returns the content
/// from the shapes the position says, and `grow --continue` is refused with what to do,
/// the members unchanged (uraid reads 0.90 reshapes, it does not write their progress).
#[test]
fn a_090_reshape_in_its_critical_section_is_examined_and_read_but_not_continued() {
    use uraid_core::metadata::sb090::{DiskDescriptor090, Superblock090};
    use uraid_core::metadata::{sb090_offset_sectors, MetadataVersion, Superblock};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &["-e", "0.90"]);
    for d in &devs {
        let path = dir.join(d);
        let mut img = std::fs::read(&path).unwrap();
        let at = sb090_offset_sectors(img.len() as u64).unwrap() as usize * 512;
        let Ok(Superblock::V090(mut sb)) = Superblock::decode(MetadataVersion::V0_90, &img[at..at + 4096]) else { panic!("0.90") };
        sb.minor_version = 91;
        sb.raid_disks = 4;
        sb.delta_disks = 1;
        (sb.new_level, sb.new_layout, sb.new_chunk_bytes) = (sb.level, sb.layout, sb.chunk_size_bytes);
        sb.reshape_position_sectors = 0;
        sb.state &= !Superblock090::STATE_CLEAN;
        for disk in sb.disks.iter_mut().chain(std::iter::once(&mut sb.this_disk)) {
            // A new role: in sync from the start, as md's raid5_start_reshape sets it.
            if disk.number == 3 {
                (disk.raid_disk, disk.state) = (3, DiskDescriptor090::STATE_ACTIVE | DiskDescriptor090::STATE_SYNC);
            }
        }
        sb.events += 1;
        sb.update_checksum();
        img[at..at + 4096].copy_from_slice(&sb.encode());
        std::fs::write(&path, img).unwrap();
    }
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    let reshape = &ex[0]["reshape"];
    assert_eq!((reshape["delta_devices"].as_i64(), reshape["raid_devices_before"].as_i64()), (Some(1), Some(3)), "{ex}");
    assert_eq!(reshape["position_sectors"].as_u64(), Some(0), "{ex}");
    assert_eq!(read_prefix(dir, &devs, content.len()), content);
    let before = sums(dir, &devs);
    let out = run(dir, &with_devs(&["grow", "--continue"], &devs));
    assert!(!out.status.success(), "{}", describe("uraid", &["grow", "--continue"], &out));
    let err = String::from_utf8_lossy(&out.stderr);
    // Nothing moved yet: the first stripes of the new shape would land on old data not
    // yet moved, which only md's backup file makes crash-safe.
    assert!(err.contains("backup file") && err.contains("mdadm"), "{err}");
    assert_eq!(sums(dir, &devs), before, "a refusal changes nothing");
    // Starting one without a backup file is refused the same way.
    let (devs, _) = filled(dir, "5", 3, &["-e", "0.90"]);
    let out = run(dir, &with_devs(&["grow", "--raid-devices", "4"], &devs));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0.90") && err.contains("--backup-file"), "{err}");
}

/// A 0.90 grow started in place with a backup file, as mdadm --grow --backup-file starts
/// one: an existing file is never taken for the backup (mdadm creates it new); stopped
/// before anything moves, the critical section lives in the backup only (mdadm's format),
/// a continue without it is refused and one with it restores the section and finishes;
/// the file is removed at the end.
#[test]
fn a_090_grow_starts_in_place_with_a_backup_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (devs, content) = filled(dir, "5", 3, &["-e", "0.90"]);
    std::fs::write(dir.join("bk"), b"an old backup").unwrap();
    refused(dir, &devs, &["grow", "--raid-devices", "4", "--backup-file", "bk"], "must not exist");
    std::fs::remove_file(dir.join("bk")).unwrap();
    ok(dir, &with_devs(&["grow", "-q", "--sync-max", "0", "--raid-devices", "4", "--backup-file", "bk"], &devs));
    let backup = std::fs::read(dir.join("bk")).unwrap();
    assert_eq!(&backup[..16], b"md_backup_data-1");
    assert_eq!(read_prefix(dir, &devs, content.len()), content, "read while only the backup holds the section");
    refused(dir, &devs, &["grow", "--continue"], "backup");
    ok(dir, &with_devs(&["grow", "-q", "--continue", "--backup-file", "bk"], &devs));
    assert!(!dir.join("bk").exists(), "the backup file is removed at the end");
    let whole = ok(dir, &with_devs(&["read"], &devs)).stdout;
    assert_eq!(whole.len(), content.len() / 2 * 3, "three data members");
    assert_eq!(&whole[..content.len()], &content[..]);
    let ex = json(&ok(dir, &with_devs(&["examine", "--json"], &devs)));
    assert!(ex.as_array().unwrap().iter().all(|e| e["raid_devices"] == 4 && e["version"] == "0.90.00"), "{ex}");
}
