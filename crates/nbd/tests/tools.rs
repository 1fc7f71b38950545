//! The server against real NBD clients (Debian's libnbd-bin and qemu-utils), when they are
//! installed (scripts/setup installs them). Each test prints why it skipped otherwise.

mod common;

use common::{array, Rng, Running};
use std::process::{Command, Output};
use uraid_core::geometry::Level;
use uraid_nbd::Export;

fn have(tool: &str) -> bool {
    match Command::new(tool).arg("--version").output() {
        Ok(o) if o.status.success() => true,
        _ => {
            uraid_testkit::skip("nbd tools", &format!("`{tool}` not found (install libnbd-bin / qemu-utils, see scripts/setup)"));
            false
        }
    }
}

fn run(tool: &str, args: &[&str]) -> Output {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A RAID6 of five 8 MiB members (about 24 MiB, room for the 8 MiB file) and a RAID1.
fn exports() -> Vec<Export> {
    vec![Export::new(array(Level::Raid6, 5, 8 << 20, "data")), Export::new(array(Level::Raid1, 2, 2 << 20, "mirror"))]
}

#[test]
fn nbdinfo_lists_and_describes_exports() {
    if !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("nbd.sock");
    let ex = exports();
    let sizes: Vec<u64> = ex.iter().map(|e| e.array.size_bytes()).collect();
    let server = Running::start(&format!("unix:{}", sock.display()), ex);

    let uri = format!("nbd+unix://?socket={}", sock.display());
    let list = stdout(&run("nbdinfo", &["--list", &uri]));
    println!("{list}");
    assert!(list.contains("export=\"data\""), "{list}");
    assert!(list.contains("export=\"mirror\""), "{list}");
    assert!(list.contains("raid6"), "description listed: {list}");
    assert!(list.contains(&sizes[0].to_string()), "size of data: {list}");

    let info = stdout(&run("nbdinfo", &[&server.uris[0]]));
    println!("{info}");
    assert!(info.contains("export=\"data\""), "{info}");
    assert!(info.contains(&format!("export-size: {}", sizes[0])), "{info}");
    assert!(info.contains("can_multi_conn: true"), "{info}");
    assert!(info.contains("can_flush: true"), "{info}");
    assert!(info.contains("can_fua: true"), "{info}");
    assert!(info.contains("can_trim: true"), "{info}");
    assert!(info.contains("can_zero: true"), "{info}");
    assert!(info.contains("is_read_only: false"), "{info}");
    assert!(info.contains("block_size_preferred: 4096"), "{info}");

    let size = stdout(&run("nbdinfo", &["--size", &server.uris[1]]));
    assert_eq!(size.trim(), sizes[1].to_string());
}

#[test]
fn nbdcopy_in_and_out_and_qemu_img_compare() {
    if !have("nbdcopy") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("nbd.sock");
    let ex = exports();
    let export_size = ex[0].array.size_bytes();
    assert!(export_size >= 8 << 20);
    let server = Running::start(&format!("unix:{}", sock.display()), ex);
    let uri = &server.uris[0];

    let src = dir.path().join("src.img");
    let data = Rng::new(0xC0FFEE).bytes(8 << 20);
    std::fs::write(&src, &data).expect("write src");
    let src_s = src.to_string_lossy().into_owned();
    // In: file → export (several connections in parallel: the export says CAN_MULTI_CONN).
    run("nbdcopy", &["--flush", &src_s, uri]);

    // Out: export → file; the first 8 MiB are the file, the rest zeros.
    let out = dir.path().join("out.img");
    std::fs::write(&out, b"").expect("create out");
    let out_s = out.to_string_lossy().into_owned();
    run("nbdcopy", &[uri, &out_s]);
    let back = std::fs::read(&out).expect("read out");
    assert_eq!(back.len() as u64, export_size);
    assert!(back[..data.len()] == data[..], "copied-out data differs");
    assert!(back[data.len()..].iter().all(|b| *b == 0), "tail not zero");

    // Single connection, bigger requests, through a pipe: same answer.
    let out2 = dir.path().join("out2.img");
    std::fs::write(&out2, b"").expect("create out2");
    run("nbdcopy", &["--connections=1", "--request-size=4194304", uri, &out2.to_string_lossy()]);
    assert!(std::fs::read(&out2).expect("read out2") == back);

    if have("qemu-img") {
        // Different sizes: qemu-img checks the larger image's extra part reads as zeros.
        let o = run("qemu-img", &["compare", "-f", "raw", "-F", "raw", &src_s, uri]);
        println!("{}", stdout(&o));
        let o = run("qemu-img", &["info", "--output=json", uri]);
        assert!(stdout(&o).contains(&format!("\"virtual-size\": {export_size}")), "{}", stdout(&o));
    }
}
