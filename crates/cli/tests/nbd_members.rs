//! Arrays whose members are NBD exports (issue 14), through the `uraid` binary: nbdkit
//! serves each member on a Unix socket; create, write, read and examine take the URIs
//! wherever they take a device.

use std::process::Output;
use std::time::Duration;
use uraid_testkit::nbdkit::Nbdkit;
use uraid_testkit::process::{describe, run_limited};

const BIN: &str = env!("CARGO_BIN_EXE_uraid");
/// A hang guard, never a speed limit.
const HANG: Duration = Duration::from_secs(120);

fn uraid(args: &[&str]) -> Output {
    run_limited(BIN, args, &[], HANG)
}

fn ok(args: &[&str]) -> String {
    let out = uraid(args);
    assert!(out.status.success(), "{}", describe("uraid", args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_raid6_of_nbdkit_members_is_created_written_read_and_examined() {
    if !uraid_testkit::nbdkit::available("cli nbd members") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kits: Vec<Nbdkit> = (0..4).map(|i| Nbdkit::start(&dir.path().join(format!("m{i}.sock")), &["memory", "32M"])).collect();
    let uris: Vec<String> = kits.iter().map(Nbdkit::uri).collect();
    let u: Vec<&str> = uris.iter().map(String::as_str).collect();

    let mut create = vec!["create", "--level", "6", "--raid-devices", "4", "--chunk", "64K", "-N", "remote"];
    create.extend(&u);
    ok(&create);
    let examined = ok(&["examine", u[2]]);
    assert!(examined.contains("raid6") && examined.contains("remote"), "{examined}");

    // Write 3 MiB at 1 MiB through stdin, read it back.
    let data: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(dir.path().join("in.bin"), &data).unwrap();
    let script = format!("exec \"$0\" write --offset 1M \"$@\" < {}", dir.path().join("in.bin").display());
    let mut args = vec!["-c", script.as_str(), BIN];
    args.extend(&u);
    let out = run_limited("sh", &args, &[], HANG);
    assert!(out.status.success(), "{}", describe("sh", &args, &out));
    let mut read = vec!["read", "--offset", "1M", "--length", "3M"];
    read.extend(&u);
    let out = uraid(&read);
    assert!(out.status.success(), "{}", describe("uraid", &read, &out));
    assert!(out.stdout == data, "the array reads back what was written over NBD");

    // The same export twice is refused before anything is written; so is a bad URI.
    let mut twice = vec!["create", "--level", "1", "--raid-devices", "2", "--force"];
    twice.extend([u[0], u[0]]);
    let out = uraid(&twice);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("same device"), "{}", describe("uraid", &twice, &out));
    let out = uraid(&["examine", "nbd://:0/x"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not a usable NBD URI")
            || String::from_utf8_lossy(&out.stderr).contains("not a usable NBD URI"),
        "{}",
        describe("uraid", &["examine"], &out)
    );
}
