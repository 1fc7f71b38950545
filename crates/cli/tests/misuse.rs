//! Misuse that must never cost data (issue "Misuse must never cost data"): two processes on
//! the same members, one device given twice under different spellings, control commands run
//! from another directory, and members that are not disks at all. Every refusal is checked
//! to change no byte of any member.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use uraid_testkit::process::{describe, run_limited_in};

const BIN: &str = env!("CARGO_BIN_EXE_uraid");
/// A hang guard, never a speed limit.
const HANG: Duration = Duration::from_secs(120);

struct Env {
    dir: tempfile::TempDir,
    run_dir: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("run");
        std::fs::create_dir(&run_dir).unwrap();
        Env { dir, run_dir }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// Runs `uraid ARGS` in `cwd` (the temp dir by default).
    fn run_in(&self, cwd: &Path, args: &[&str], run_dir: &Path) -> Output {
        run_limited_in(BIN, args, &[("URAID_RUN_DIR", run_dir)], Some(cwd), HANG)
    }
    fn run(&self, args: &[&str]) -> Output {
        self.run_in(self.dir.path(), args, &self.run_dir)
    }
    fn ok(&self, args: &[&str]) -> Output {
        let out = self.run(args);
        assert!(out.status.success(), "{}", describe("uraid", args, &out));
        out
    }
    /// Runs and expects a refusal whose message contains every one of `needles`.
    fn refused(&self, args: &[&str], needles: &[&str]) -> String {
        self.refused_out(self.run(args), args, needles)
    }
    fn refused_out(&self, out: Output, args: &[&str], needles: &[&str]) -> String {
        assert!(!out.status.success(), "expected a refusal: {}", describe("uraid", args, &out));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        for n in needles {
            assert!(err.contains(n), "{:?} not in the message: {}", n, describe("uraid", args, &out));
        }
        assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
        err
    }
    fn sums(&self, names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("{:x}", Sha256::digest(std::fs::read(self.path(n)).unwrap()))).collect()
    }
    /// `uraid serve` in the background; returns when its control socket answers.
    fn serve(&self, name: &str, members: &[&str]) -> Server {
        self.serve_with(name, members, &[])
    }
    fn serve_with(&self, name: &str, members: &[&str], options: &[&str]) -> Server {
        let mut args = vec!["serve".to_string(), "--name".into(), name.into()];
        args.extend(options.iter().map(|o| o.to_string()));
        args.extend(members.iter().map(|m| m.to_string()));
        let child = Command::new(BIN)
            .args(&args)
            .current_dir(self.dir.path())
            .env("URAID_RUN_DIR", &self.run_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Server { child };
        let start = Instant::now();
        while !self.run(&["detail", name]).status.success() {
            assert!(server.child.try_wait().unwrap().is_none(), "uraid serve {name} exited");
            assert!(start.elapsed() < HANG, "uraid serve {name} hung: no answer");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }
    /// Waits until the served array is clean with no job (nothing more will be written).
    fn wait_quiet(&self, name: &str) {
        let start = Instant::now();
        loop {
            let out = self.ok(&["detail", name, "--json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["state"] == "clean" && v["job"].is_null() {
                return;
            }
            assert!(start.elapsed() < HANG, "{name} hung: never clean and idle: {v}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const MEMBERS: [&str; 3] = ["m0.img", "m1.img", "m2.img"];

fn created(env: &Env) {
    env.ok(&["create", "-l", "5", "-n", "3", "--size", "16M", "--name", "data", MEMBERS[0], MEMBERS[1], MEMBERS[2]]);
}

/// D1: while an array is served, no second process may write its members: another serve
/// (another name, another run dir), an offline write, a create --force. Not a byte changes.
#[test]
fn a_served_array_s_members_are_refused_to_every_other_writer() {
    let env = Env::new();
    created(&env);
    let _server = env.serve("data", &MEMBERS);
    env.wait_quiet("data");
    let before = env.sums(&MEMBERS);
    let holder = "in use by process";
    env.refused(&["serve", "--name", "other", MEMBERS[0], MEMBERS[1], MEMBERS[2]], &[holder, "m0.img"]);
    let other_run = env.path("run2");
    std::fs::create_dir(&other_run).unwrap();
    let args = ["serve", "--name", "data", MEMBERS[0], MEMBERS[1], MEMBERS[2]];
    env.refused_out(env.run_in(env.dir.path(), &args, &other_run), &args, &[holder]);
    env.refused(&["write", "--offset", "0", MEMBERS[0], MEMBERS[1], MEMBERS[2]], &[holder]);
    env.refused(&["create", "--force", "-l", "5", "-n", "3", "--name", "x", MEMBERS[0], MEMBERS[1], MEMBERS[2]], &[holder]);
    assert_eq!(env.sums(&MEMBERS), before, "a refused command changed a member");
    // Read-only commands still work, and say the array is live.
    let out = env.ok(&["read", "--length", "4096", MEMBERS[0], MEMBERS[1], MEMBERS[2]]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is in use by process"), "{}", describe("uraid", &["read"], &out));
    let out = env.ok(&["examine", MEMBERS[0]]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is in use by process"), "{}", describe("uraid", &["examine"], &out));
    assert_eq!(env.sums(&MEMBERS), before);
}

/// D2: one device given twice, by any spelling, is refused before anything is written.
#[test]
fn the_same_device_twice_is_refused_by_any_spelling() {
    let env = Env::new();
    let a = env.path("a.img");
    std::fs::write(&a, vec![0u8; 16 << 20]).unwrap();
    std::os::unix::fs::symlink(&a, env.path("link.img")).unwrap();
    std::fs::hard_link(&a, env.path("hard.img")).unwrap();
    std::fs::create_dir(env.path("sub")).unwrap();
    let before = env.sums(&["a.img"]);
    let abs = a.to_str().unwrap().to_string();
    for other in ["a.img", "./a.img", abs.as_str(), "sub/../a.img", "link.img", "hard.img"] {
        env.refused(&["create", "-l", "1", "-n", "2", "--force", "--name", "x", "a.img", other], &["same device"]);
        assert_eq!(env.sums(&["a.img"]), before, "{other}: a refused create changed the file");
    }
    // Files that do not exist yet: no file is left behind either.
    env.refused(&["create", "-l", "0", "-n", "2", "--size", "8M", "--name", "x", "new.img", "./new.img"], &["same device"]);
    assert!(!env.path("new.img").exists(), "a refused create left a file behind");
    // Assembly commands too.
    env.ok(&["create", "-l", "1", "-n", "2", "--size", "8M", "--name", "y", "b0.img", "b1.img"]);
    env.refused(&["read", "--length", "512", "b0.img", "./b0.img"], &["same device"]);
}

/// D3: control commands match members by identity, from any directory, by any spelling; an
/// unrelated file that shares a member's name is never taken for it.
#[test]
fn control_commands_match_members_by_identity_not_by_text() {
    let env = Env::new();
    created(&env);
    let _server = env.serve("data", &MEMBERS);
    env.wait_quiet("data");
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("m1.img"), b"unrelated").unwrap();
    // Same name, another file: refused, and the member stays in sync.
    let out = env.run_in(&elsewhere, &["fail", "data", "m1.img"], &env.run_dir);
    env.refused_out(out, &["fail", "data", "m1.img"], &["is not a member of data"]);
    let detail = env.ok(&["detail", "data", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&detail.stdout).unwrap();
    assert_eq!(v["missing_roles"], serde_json::json!([]), "{v}");
    // The member by its absolute path, from another directory: found.
    let abs = env.path("m1.img");
    let out = env.run_in(&elsewhere, &["fail", "data", abs.to_str().unwrap()], &env.run_dir);
    assert!(out.status.success(), "{}", describe("uraid fail", &[], &out));
    let v: serde_json::Value = serde_json::from_slice(&env.ok(&["detail", "data", "--json"]).stdout).unwrap();
    assert_eq!(v["missing_roles"], serde_json::json!([1]), "{v}");
    // Removed by another spelling (a relative path through a subdirectory).
    env.ok(&["remove", "data", "elsewhere/../m1.img"]);
    // A device already attached cannot be added again under another name.
    std::os::unix::fs::symlink(env.path("m0.img"), env.path("alias.img")).unwrap();
    env.refused(&["add", "data", "alias.img"], &["already attached"]);
}

/// D7: a FIFO (or anything but a file or block device) is refused at once, never opened.
#[test]
fn a_fifo_is_refused_without_hanging() {
    let env = Env::new();
    let fifo = env.path("pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for cmd in [&["read", "pipe"][..], &["examine", "pipe"][..], &["write", "--offset", "0", "pipe"][..]] {
        env.refused(cmd, &["pipe", "FIFO"]);
    }
    env.refused(&["create", "-l", "1", "-n", "2", "--force", "--size", "8M", "--name", "x", "pipe", "other.img"], &["pipe", "FIFO"]);
    assert!(!env.path("other.img").exists(), "a refused create left a file behind");
}

fn detail(env: &Env, name: &str) -> serde_json::Value {
    serde_json::from_slice(&env.ok(&["detail", name, "--json"]).stdout).unwrap()
}

/// Waits until the array has every role, no job, and `cond` holds.
fn wait_whole(env: &Env, name: &str, what: &str, cond: impl Fn(&serde_json::Value) -> bool) {
    let start = Instant::now();
    loop {
        let v = detail(env, name);
        if v["missing_roles"] == serde_json::json!([]) && v["job"].is_null() && cond(&v) {
            return;
        }
        assert!(start.elapsed() < HANG, "{name} hung waiting for {what}: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn device_state<'a>(v: &'a serde_json::Value, file: &str) -> Option<&'a serde_json::Value> {
    v["devices"].as_array().unwrap().iter().find(|d| d["device"].as_str().is_some_and(|p| p.ends_with(file)))
}

/// D4: a removed member comes back with --re-add (not with a bare add, which explains what
/// to use); a device from another array needs --force and then works; a spare can be the
/// target of replace --with; a live member is refused with or without --force.
#[test]
fn re_add_force_and_spares_as_replace_targets_work_as_in_mdadm() {
    let env = Env::new();
    created(&env);
    // Another array's member, for --force.
    env.ok(&["create", "-l", "1", "-n", "2", "--size", "16M", "--name", "other", "o0.img", "o1.img"]);
    let _server = env.serve("data", &MEMBERS);
    env.wait_quiet("data");
    env.ok(&["fail", "data", "m1.img"]);
    env.ok(&["remove", "data", "m1.img"]);
    env.refused(&["add", "data", "m1.img"], &["former member", "--re-add"]);
    env.ok(&["add", "--re-add", "data", "m1.img"]);
    wait_whole(&env, "data", "the re-added member's rebuild", |_| true);
    // Live members: refused however they are named, --force or not.
    env.refused(&["add", "--force", "data", "m2.img"], &["already attached"]);
    env.refused(&["add", "--re-add", "data", "./m0.img"], &["already attached"]);
    // Another array's device: --force is the way, and it works.
    env.refused(&["add", "data", "o0.img"], &["--force"]);
    env.ok(&["add", "--force", "data", "o0.img"]);
    let v = detail(&env, "data");
    assert_eq!(device_state(&v, "o0.img").map(|d| d["state"].clone()), Some(serde_json::json!("spare")), "{v}");
    // That spare is a replace target.
    env.ok(&["replace", "data", "m0.img", "--with", "o0.img"]);
    wait_whole(&env, "data", "the replacement", |v| device_state(v, "o0.img").is_some_and(|d| d["state"] != "spare"));
    let v = detail(&env, "data");
    assert!(device_state(&v, "o0.img").is_some_and(|d| d["role"] == 0), "the spare took role 0: {v}");
}

/// Item 6: refusals are one line that names what is wrong and the fix.
#[test]
fn mistakes_mdadm_refuses_are_refused_with_the_fix() {
    let env = Env::new();
    env.refused(&["create", "-l", "5", "-n", "3", "--chunk", "0", "--size", "8M", "a", "b", "c"], &["--chunk 0", "multiple of 4K"]);
    env.refused(&["create", "-l", "5", "-n", "3", "--chunk", "96K", "--size", "8M", "a", "b", "c"], &["power of two"]);
    for level in ["0", "1", "linear"] {
        env.refused(&["create", "-l", level, "-n", "1", "--size", "8M", "one.img"], &["unusual number of drives", "--force"]);
    }
    let err = env.refused(&["create", "-l", "5", "-n", "3", "-p", "9", "--size", "8M", "a", "b", "c"], &["left-symmetric (2)"]);
    assert!(!err.contains("..=") && err.matches("not supported").count() == 1, "{err}");
    env.refused(&["create", "-l", "5", "-n", "3", "-c", "8T", "--size", "8M", "a", "b", "c"], &["--chunk 8T: too large"]);
    assert!(!env.path("a").exists() && !env.path("one.img").exists(), "a refused create left a file");
    env.ok(&["create", "-l", "1", "-n", "1", "--force", "--size", "8M", "one.img"]);
    env.refused(&["create", "-l", "0", "-n", "2", "-x", "1", "--size", "8M", "r0", "r1", "r2"], &["spare"]);
    // A spare cannot be added to RAID0; check/repair there say there is nothing to do.
    env.ok(&["create", "-l", "0", "-n", "2", "--size", "8M", "--name", "z", "z0.img", "z1.img"]);
    let _server = env.serve("z", &["z0.img", "z1.img"]);
    std::fs::write(env.path("s.img"), vec![0u8; 8 << 20]).unwrap();
    env.refused(&["add", "z", "s.img"], &["no redundancy"]);
    env.refused(&["check", "z"], &["no redundancy", "nothing to check"]);
    env.refused(&["repair", "z"], &["nothing to repair"]);
    env.ok(&["stop", "z"]);
    // A partial write says how much it wrote.
    let size = 2 * (8 << 20);
    let out = std::process::Command::new(BIN)
        .args(["write", "--offset", "0", "z0.img", "z1.img"])
        .current_dir(env.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            let mut stdin = c.stdin.take().unwrap();
            let _ = stdin.write_all(&vec![7u8; size]);
            drop(stdin);
            c.wait_with_output()
        })
        .unwrap();
    let err = env.refused_out(out, &["write"], &["past the array end", "wrote"]);
    let wrote: u64 = err.split("wrote ").nth(1).and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).expect("a byte count");
    assert!(wrote > 0 && wrote < size as u64, "{err}");
    // Messages carry no Rust debug values.
    for bad in ["InSync(", "Some(", "..=", "out of range integral type conversion"] {
        assert!(!err.contains(bad), "{err}");
    }
}

/// `uraid write --offset OFF MEMBERS... < data`, offline (the array is not served).
fn write_offline(env: &Env, offset: &str, members: &[&str], data: &[u8]) {
    let mut args = vec!["write", "--offset", offset];
    args.extend_from_slice(members);
    let mut child = Command::new(BIN)
        .args(&args)
        .current_dir(env.dir.path())
        .env("URAID_RUN_DIR", &env.run_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(data).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", describe("uraid", &args, &out));
}

/// md's bitmap-based --re-add: a member removed from an array with an internal bitmap comes
/// back in its old role, and only the bitmap chunks written while it was gone (here one, by
/// an offline degraded write, with the clean mark that ends it in between) are rebuilt; the
/// reply says so. Every byte then reads back from it, and a check finds nothing. Without a
/// bitmap the reply says the re-add is a full rebuild, and why.
#[test]
fn re_add_with_a_bitmap_rebuilds_only_the_chunks_written_while_it_was_gone() {
    let env = Env::new();
    env.ok(&[
        "create",
        "-l",
        "5",
        "-n",
        "3",
        "--size",
        "16M",
        "--bitmap",
        "internal",
        "--bitmap-chunk",
        "1M",
        "--name",
        "data",
        MEMBERS[0],
        MEMBERS[1],
        MEMBERS[2],
    ]);
    // A write while whole: the clean mark that ends it clears the bits the initial sync left.
    write_offline(&env, "8M", &MEMBERS, &[1u8; 4096]);
    {
        let _server = env.serve("data", &MEMBERS);
        env.wait_quiet("data");
        env.ok(&["fail", "data", "m1.img"]);
        env.ok(&["remove", "data", "m1.img"]);
        env.ok(&["stop", "data"]);
    }
    // While it is out: a degraded write (array bytes 1M.., member sectors of bitmap chunk 0).
    let data: Vec<u8> = (0..64 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    write_offline(&env, "1M", &["m0.img", "m2.img"], &data);
    let _server = env.serve("data", &["m0.img", "m2.img"]);
    let out = env.ok(&["add", "--re-add", "data", "m1.img"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("re-added with bitmap-based resync: 1 of "), "{}", describe("uraid add --re-add", &[], &out));
    wait_whole(&env, "data", "the re-added member's resync", |v| device_state(v, "m1.img").is_some_and(|d| d["role"] == 1));
    let out = env.ok(&["check", "data"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("mismatch_cnt=0"), "{}", describe("uraid check", &[], &out));
    env.ok(&["stop", "data"]);
    // The written bytes come back with m1 in the place of m0.
    let out = env.ok(&["read", "--run", "--offset", "1M", "--length", "64K", "m1.img", "m2.img"]);
    assert!(out.stdout == data, "the re-added member does not hold what was written while it was gone");

    // No bitmap: a full rebuild, with the reason.
    env.ok(&["create", "-l", "1", "-n", "2", "--size", "8M", "--name", "plain", "p0.img", "p1.img"]);
    let _plain = env.serve("plain", &["p0.img", "p1.img"]);
    env.wait_quiet("plain");
    env.ok(&["fail", "plain", "p1.img"]);
    env.ok(&["remove", "plain", "p1.img"]);
    let out = env.ok(&["add", "--re-add", "plain", "p1.img"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("re-added: full rebuild (the array has no write-intent bitmap)"),
        "{}",
        describe("uraid add --re-add", &[], &out)
    );
    wait_whole(&env, "plain", "the full rebuild", |_| true);
}

/// `uraid grow NAME --size max` on a served array: refused (nothing changed, still served)
/// while no member is larger; once the members grew (here, with bytes no parity covers), the
/// serving process changes the size online and resyncs the new part, after which any one
/// member can be lost and every byte still reads the same.
#[test]
fn a_served_array_takes_the_room_of_grown_members_online() {
    let env = Env::new();
    created(&env);
    let server = env.serve("data", &MEMBERS);
    env.wait_quiet("data");
    let before = env.sums(&MEMBERS);
    env.refused(&["grow", "data", "--size", "max"], &["nothing to change"]);
    env.wait_quiet("data");
    assert_eq!(env.sums(&MEMBERS), before, "a refused --size changed a member");
    let size = |env: &Env| {
        let v: serde_json::Value = serde_json::from_slice(&env.ok(&["detail", "data", "--json"]).stdout).unwrap();
        v["size_bytes"].as_u64().unwrap()
    };
    let old = size(&env);
    for (i, m) in MEMBERS.iter().enumerate() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(env.path(m)).unwrap();
        f.write_all(&uraid_parity::testdata::Prng::new(i as u64 + 7).bytes(8 << 20)).unwrap();
    }
    env.ok(&["grow", "data", "--size", "max", "--wait"]);
    assert_eq!(size(&env), old + 2 * (8 << 20), "two data members' worth more");
    env.wait_quiet("data");
    env.ok(&["stop", "data"]);
    drop(server);
    let whole = env.ok(&["read", MEMBERS[0], MEMBERS[1], MEMBERS[2]]).stdout;
    assert_eq!(whole.len() as u64, old + 2 * (8 << 20));
    for lost in 0..3 {
        let left: Vec<&str> = (0..3).filter(|&i| i != lost).map(|i| MEMBERS[i]).collect();
        let args: Vec<&str> = ["read", "--run"].into_iter().chain(left).collect();
        assert!(env.ok(&args).stdout == whole, "without member {lost}, the new part reads otherwise: not resynced");
    }
}

/// `uraid fail` during a reshape (md takes `mdadm --fail` then): the member is failed on both
/// shapes and recorded, the reshape goes on degraded to its end, and every byte written
/// before reads back from the members left.
#[test]
fn a_member_failed_during_a_reshape_leaves_a_degraded_reshape_that_finishes() {
    let env = Env::new();
    created(&env);
    let content = uraid_parity::testdata::Prng::new(11).bytes(4 << 20);
    std::fs::write(env.path("content"), &content).unwrap();
    let out = Command::new(BIN)
        .args(["write", "-q", MEMBERS[0], MEMBERS[1], MEMBERS[2]])
        .current_dir(env.dir.path())
        .stdin(std::fs::File::open(env.path("content")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Paced at 1 MB/s, the 32 MiB chunk change is still running when the fail arrives
    // (on any machine: the pace is a ceiling, never reached sooner).
    let server = env.serve_with("data", &MEMBERS, &["--speed-min", "1000", "--speed-max", "1000"]);
    env.wait_quiet("data");
    env.ok(&["grow", "data", "--chunk", "128K"]);
    let state = |env: &Env| {
        let v: serde_json::Value = serde_json::from_slice(&env.ok(&["detail", "data", "--json"]).stdout).unwrap();
        v
    };
    assert_eq!(state(&env)["state"], "reshaping", "{}", state(&env));
    env.ok(&["fail", "data", MEMBERS[1]]);
    // Nothing else may change the array under a reshape.
    env.refused(&["check", "data"], &["reshaping"]);
    // Unpaced, the degraded reshape runs to its end.
    env.ok(&["stop", "data"]);
    drop(server);
    let left = [MEMBERS[0], MEMBERS[2]];
    env.ok(&["grow", "-q", "--continue", "--run", left[0], left[1]]);
    let ex: serde_json::Value = serde_json::from_slice(&env.ok(&["examine", "--json", left[0], left[1]]).stdout).unwrap();
    assert_eq!((ex[0]["chunk_size_kib"].as_u64(), ex[0]["array_state"].as_str()), (Some(128), Some("A.A")), "{ex}");
    let got = env.ok(&["read", "--run", left[0], left[1]]).stdout;
    assert!(got[..content.len()] == content[..], "content after a reshape that lost a member");
}

/// A served array shrinks online (`uraid grow NAME -n 3 --array-size S`): refused without the
/// cut, as mdadm refuses it, with no byte changed; with it, the reshape runs in the server,
/// the array keeps its content up to the cut and the member that leaves becomes a spare.
#[test]
fn a_served_array_shrinks_online_after_the_cut() {
    let env = Env::new();
    let members = ["m0.img", "m1.img", "m2.img", "m3.img"];
    env.ok(&["create", "-l", "5", "-n", "4", "--size", "16M", "--name", "data", members[0], members[1], members[2], members[3]]);
    let size = env.ok(&["read", members[0], members[1], members[2], members[3]]).stdout.len();
    let content = uraid_parity::testdata::Prng::new(41).bytes(size);
    let path = env.path("content");
    std::fs::write(&path, &content).unwrap();
    let out = Command::new(BIN)
        .args(["write", "-q", members[0], members[1], members[2], members[3]])
        .current_dir(env.path(""))
        .stdin(std::fs::File::open(&path).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let server = env.serve("data", &members);
    env.wait_quiet("data");
    let before = env.sums(&members);
    let err = env.refused(&["grow", "data", "-n", "3"], &["--array-size"]);
    env.wait_quiet("data");
    assert_eq!(env.sums(&members), before, "a refused shrink changed a member");
    let kib = err.split("--array-size ").nth(1).and_then(|t| t.split('K').next()).unwrap().to_string();
    env.ok(&["grow", "data", "-n", "3", "--array-size", &format!("{kib}K"), "--wait"]);
    let v: serde_json::Value = serde_json::from_slice(&env.ok(&["detail", "data", "--json"]).stdout).unwrap();
    assert_eq!((v["raid_disks"].as_u64(), v["size_bytes"].as_u64()), (Some(3), Some(kib.parse::<u64>().unwrap() * 1024)), "{v}");
    env.wait_quiet("data");
    env.ok(&["stop", "data"]);
    drop(server);
    let kept = kib.parse::<usize>().unwrap() * 1024;
    let after = env.ok(&["read", members[0], members[1], members[2], members[3]]).stdout;
    assert!(after.len() == kept && after[..] == content[..kept], "content up to the cut");
    let ex: serde_json::Value = serde_json::from_slice(&env.ok(&["examine", "--json", members[3]]).stdout).unwrap();
    assert_eq!(ex[0]["role"], "spare", "{ex}");
}
