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
        let mut args = vec!["serve".to_string(), "--name".into(), name.into()];
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
