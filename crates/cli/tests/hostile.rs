//! Hostile input through the `uraid` binary (issue 12): superblocks with a valid checksum
//! that ask for four billion devices (D5) or put the data area where it cannot be (D6), and
//! members that are not disks at all (D7). Each must get a one-line error naming the file,
//! promptly, with bounded memory and no byte of any member changed.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;
use uraid_core::metadata::{Superblock1, MD_SB_MAGIC};
use uraid_testkit::process::{describe, run_limited};

const BIN: &str = env!("CARGO_BIN_EXE_uraid");
/// A hang guard, never a speed limit.
const HANG: Duration = Duration::from_secs(60);
/// Address space each uraid run may use: far more than it needs for 8 MiB members, far less
/// than a superblock's raid_disks could make it ask for.
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// Runs `uraid ARGS` in `dir` under the address-space limit and the hang guard, with
/// stdin from `dir/stdin.bin` when that exists.
fn uraid(dir: &Path, args: &[&str]) -> Output {
    let script = format!(
        "ulimit -v {ADDRESS_SPACE_KIB}; cd \"$1\" && shift && if [ -e stdin.bin ]; then exec \"$@\" < stdin.bin; else exec \"$@\"; fi"
    );
    let mut full = vec!["-c", script.as_str(), "sh", dir.to_str().unwrap(), BIN];
    full.extend_from_slice(args);
    run_limited("sh", &full, &[("URAID_RUN_DIR", &dir.join("run"))], HANG)
}

/// Expects a refusal: a failing exit (not a signal), and on stderr exactly `lines` lines,
/// each naming one of `files` once, none a panic or a Rust debug value.
fn refused(out: &Output, args: &[&str], files: &[&str], needle: &str) -> String {
    let what = describe("uraid", args, out);
    assert_eq!(out.status.code(), Some(1), "expected exit 1: {what}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), files.len(), "expected one line per bad file: {what}");
    for (line, file) in lines.iter().zip(files) {
        assert_eq!(line.matches(file).count(), 1, "{file:?} must be named once: {what}");
        assert!(line.contains(needle), "{needle:?} not in the message: {what}");
    }
    for bad in ["panicked", "RUST_BACKTRACE", "backtrace", "Some(", "Err(", "Os {", "kind:"] {
        assert!(!err.contains(bad), "{bad:?} in the message: {what}");
    }
    err
}

struct Members {
    dir: tempfile::TempDir,
    names: Vec<&'static str>,
}

impl Members {
    /// A raid5 of three 8 MiB members with 1.2 superblocks (at byte 4096).
    fn raid5() -> Members {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("run")).unwrap();
        let names = vec!["m0.img", "m1.img", "m2.img"];
        let mut args =
            vec!["create", "--level", "5", "--raid-devices", "3", "--chunk", "64K", "--size", "8M", "--assume-clean", "--name", "t"];
        args.extend_from_slice(&names);
        let out = uraid(dir.path(), &args);
        assert!(out.status.success(), "{}", describe("uraid", &args, &out));
        Members { dir, names }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn run(&self, args: &[&str]) -> Output {
        uraid(self.dir.path(), args)
    }
    fn contents(&self) -> Vec<Vec<u8>> {
        self.names.iter().map(|n| std::fs::read(self.path(n)).unwrap()).collect()
    }
    /// Changes every member's 1.2 superblock with `change`, keeping its checksum valid.
    fn rewrite_superblocks(&self, change: impl Fn(&mut Superblock1)) {
        for name in &self.names {
            let mut bytes = std::fs::read(self.path(name)).unwrap();
            assert_eq!(bytes[4096..4100], MD_SB_MAGIC.to_le_bytes(), "{name}: no 1.2 superblock");
            let mut sb = Superblock1::decode(&bytes[4096..8192]).unwrap();
            change(&mut sb);
            sb.update_checksum();
            let encoded = sb.encode();
            bytes[4096..4096 + encoded.len()].copy_from_slice(&encoded);
            std::fs::write(self.path(name), &bytes).unwrap();
        }
    }
}

/// D5: raid_disks = 0xffffffff with a valid checksum. Before: `examine` grew to 11.6 GB and
/// hung, `read` and `serve --scan` aborted with a Rust backtrace.
#[test]
fn four_billion_raid_disks_get_a_one_line_error() {
    let m = Members::raid5();
    m.rewrite_superblocks(|sb| sb.raid_disks = u32::MAX);
    let before = m.contents();

    let out = m.run(&["examine", "m0.img"]);
    refused(&out, &["examine", "m0.img"], &["m0.img"], "raid_disks 4294967295");
    assert!(out.stdout.len() < 4096, "examine printed {} bytes", out.stdout.len());

    let read = ["read", "m0.img", "m1.img", "m2.img"];
    refused(&m.run(&read), &read, &["m0.img"], "raid_disks 4294967295");

    let dir = m.dir.path().to_str().unwrap().to_string();
    let scan = ["serve", "t", "--scan", dir.as_str()];
    let out = m.run(&scan);
    assert_eq!(out.status.code(), Some(1), "{}", describe("uraid", &scan, &out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{}", describe("uraid", &scan, &out));
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{}", describe("uraid", &scan, &out));

    assert!(m.contents() == before, "a refused command changed a member");
}

/// D6: data_offset = 2^63 sectors (byte 0 once multiplied by 512), and data_offset = 0 (the
/// data area over the superblock, no arithmetic needed). Before: `write` put user data over
/// the superblock area (or, with overflow checks, panicked). Nothing may be written.
#[test]
fn a_data_area_over_the_superblock_is_refused_and_nothing_is_written() {
    for data_offset in [1u64 << 63, 0] {
        let m = Members::raid5();
        m.rewrite_superblocks(|sb| sb.data_offset_sectors = data_offset);
        let before = m.contents();
        std::fs::write(m.path("stdin.bin"), vec![0xa5u8; 256 << 10]).unwrap();
        let write = ["write", "--offset", "0", "m0.img", "m1.img", "m2.img"];
        let out = m.run(&write);
        refused(&out, &write, &["m0.img"], "data area");
        std::fs::remove_file(m.path("stdin.bin")).unwrap();
        let read = ["read", "m0.img", "m1.img", "m2.img"];
        refused(&m.run(&read), &read, &["m0.img"], "data area");
        let out = m.run(&["examine", "m1.img"]);
        refused(&out, &["examine", "m1.img"], &["m1.img"], "data area");
        assert!(m.contents() == before, "data_offset {data_offset}: a refused command changed a member");
    }
}

/// D7: a FIFO, a character device and a directory are refused at once by `examine` and
/// `read`, in one line that names the file once. Before: both hung forever on a FIFO.
#[test]
fn members_that_are_not_disks_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("run")).unwrap();
    let fifo = dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::fs::create_dir(dir.path().join("folder")).unwrap();
    for (file, what) in [("pipe", "FIFO"), ("/dev/null", "character device"), ("folder", "directory")] {
        for cmd in ["examine", "read"] {
            let args = [cmd, file];
            refused(&uraid(dir.path(), &args), &args, &[file], what);
        }
    }
}
