//! Shared by the FUSE tests: arrays made with the real create planner, skip checks, and a
//! tiny deterministic generator.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use uraid_core::geometry::Level;
use uraid_engine::create::ArraySketch;
use uraid_engine::{Array, ArrayOptions, Member};

/// Writes md metadata for a new array over `members` (all the same size).
pub fn create(level: Level, members: &[Arc<dyn Member>], chunk_kib: u32) {
    let mut sketch = ArraySketch::new(level, "fuse");
    sketch.chunk_kib = chunk_kib;
    sketch.array_uuid = [0x5a; 16];
    sketch.write(members, &[]).expect("create");
}

pub fn assemble(members: &[Arc<dyn Member>], writable: bool) -> Array {
    let opts = ArrayOptions { writable, ..Default::default() };
    Array::assemble(members.to_vec(), &opts).map(|(a, _)| a).unwrap_or_else(|e| panic!("assemble: {e}"))
}

/// Why FUSE tests cannot run here, if they cannot.
pub fn fuse_unavailable() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    let root = Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0\n")).unwrap_or(false);
    if !root && !have("fusermount3") {
        return Some("not root and fusermount3 is missing (install Debian's fuse3)".into());
    }
    None
}

pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0\n")).unwrap_or(false)
}

pub fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Runs a command, panicking with its output if it fails; returns stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether `dir` is a mount point now (per /proc/self/mountinfo).
pub fn is_mount_point(dir: &Path) -> bool {
    let Ok(canon) = dir.canonicalize() else { return false };
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = canon.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Seeded test data: the parity crate's generator, shared by every test suite.
pub use uraid_parity::testdata::Prng as Rng;
