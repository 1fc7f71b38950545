//! End-to-end tests of `uraid serve`'s exports, driven only through the `uraid` binary and
//! real clients: NBD (nbdinfo, nbdcopy, qemu-img, fio's nbd engine) and FUSE (a loop device
//! over the exported file, ext4 on it, e2fsck), with members failed and rebuilt while files
//! are being written, and a `kill -9` of the serving process in the middle of writes.
//!
//! Every resource is held by an RAII guard declared in acquisition order, so a panic unwinds
//! them in reverse: ext4 unmounted, loop device detached, FUSE unmounted, `uraid serve`
//! killed, temporary directory removed. Each test has its own `URAID_RUN_DIR`.
//!
//! Run: `cargo test --release -p uraid --test exports -- --test-threads=1` (needs root for
//! losetup/mount; tests are recorded as skipped (SKIPPED lines, and scripts/test's summary) where a tool is missing).

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uraid_parity::testdata::Prng;

const BIN: &str = env!("CARGO_BIN_EXE_uraid");

/// How long a test waits for something that must happen (a command to finish, a server to
/// answer, a rebuild to end, a writer to make progress) before calling it hung. Only a hang
/// reaches it, never a slow machine: no verdict here depends on speed.
const HANG: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// Environment checks
// ---------------------------------------------------------------------------------------

fn have(tool: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output().map(|o| o.status.success()).unwrap_or(false)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Why the FUSE + loop + ext4 tests cannot run here, if they cannot.
fn fuse_stack_unavailable() -> Option<String> {
    if !is_root() {
        return Some("not root (losetup and mount need root)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("/dev/loop-control is missing (no loop devices here)".into());
    }
    for tool in ["losetup", "mkfs.ext4", "e2fsck", "mount", "umount", "sync"] {
        if !have(tool) {
            return Some(format!("{tool} is missing (util-linux, e2fsprogs)"));
        }
    }
    if !have("fusermount3") && !have("fusermount") {
        return Some("fusermount3 is missing (fuse3)".into());
    }
    None
}

macro_rules! skip_if {
    ($why:expr) => {
        if let Some(why) = $why {
            uraid_testkit::skip("exports: an end-to-end FUSE/loop/ext4 test", &why);
            return;
        }
    };
}

// ---------------------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------------------

use uraid_testkit::process::{describe, run_limited};

/// Runs a system tool; panics with its output unless it succeeds. Returns stdout.
fn sh(cmd: &str, args: &[&str]) -> String {
    let out = run_limited(cmd, args, &[], HANG);
    assert!(out.status.success(), "{}", describe(cmd, args, &out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

// ---------------------------------------------------------------------------------------
// Per-test environment and the `uraid` binary
// ---------------------------------------------------------------------------------------

struct Env {
    dir: tempfile::TempDir,
    run_dir: PathBuf,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let run_dir = dir.path().join("run");
        std::fs::create_dir(&run_dir).expect("mkdir run");
        Env { dir, run_dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn uraid_raw(&self, args: &[&str]) -> Output {
        run_limited(BIN, args, &[("URAID_RUN_DIR", &self.run_dir)], HANG)
    }

    /// Runs `uraid ARGS`, panicking with its output unless it succeeds; returns stdout.
    fn uraid(&self, args: &[&str]) -> String {
        let out = self.uraid_raw(args);
        assert!(out.status.success(), "{}", describe("uraid", args, &out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `uraid create` over new sparse files named `names`; returns their absolute paths.
    fn create(&self, level: &str, names: &[&str], size: &str, array: &str, extra: &[&str]) -> Vec<PathBuf> {
        let paths: Vec<PathBuf> = names.iter().map(|n| self.path(n)).collect();
        let n = names.len().to_string();
        let mut args = vec!["create", "-l", level, "-n", &n, "-c", "64K", "--size", size, "--name", array];
        args.extend_from_slice(extra);
        args.extend(paths.iter().map(|x| p(x)));
        self.uraid(&args);
        paths
    }

    /// A blank spare file the size of `like`.
    fn spare(&self, name: &str, like: &Path) -> PathBuf {
        let path = self.path(name);
        let len = std::fs::metadata(like).expect("stat member").len();
        File::create(&path).and_then(|f| f.set_len(len)).expect("spare file");
        path
    }

    /// Starts `uraid serve MEMBERS EXTRA --name NAME` and waits for its control socket.
    fn serve(&self, name: &str, members: &[PathBuf], extra: &[&str]) -> Serve {
        let log = self.path(&format!("serve-{name}-{}.log", std::process::id() ^ rand_u32()));
        let log_file = File::create(&log).expect("serve log");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve").args(members).args(extra).arg("--name").arg(name);
        cmd.env("URAID_RUN_DIR", &self.run_dir).stdin(Stdio::null()).stdout(log_file.try_clone().expect("dup log")).stderr(log_file);
        let child = cmd.spawn().expect("spawn uraid serve");
        let mut serve = Serve { child: Some(child), log, name: name.to_string() };
        let start = Instant::now();
        loop {
            if let Some(st) = serve.try_wait() {
                panic!("uraid serve exited early ({st}):\n{}", serve.log_text());
            }
            if self.uraid_raw(&["detail", name, "--json"]).status.success() {
                return serve;
            }
            if start.elapsed() > HANG {
                panic!("uraid serve did not answer within {HANG:?} (hung):\n{}", serve.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn detail(&self, name: &str) -> Value {
        let out = self.uraid(&["detail", name, "--json"]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("detail --json is not JSON ({e}): {out}"))
    }

    /// Polls `uraid detail` until `done` holds; panics with the last status if that has not
    /// happened after [`HANG`] (a hang guard, not a time budget).
    fn wait_for(&self, name: &str, what: &str, serve: &mut Serve, mut done: impl FnMut(&Value) -> bool) -> Value {
        let limit = HANG;
        let start = Instant::now();
        loop {
            if let Some(st) = serve.try_wait() {
                panic!("uraid serve exited ({st}) while waiting for {what}:\n{}", serve.log_text());
            }
            let d = self.detail(name);
            if done(&d) {
                return d;
            }
            if start.elapsed() > limit {
                panic!(
                    "{what}: not reached within {limit:?} (hung); last `uraid detail {name} --json`:\n{}\nserve log:\n{}",
                    serde_json::to_string_pretty(&d).unwrap_or_default(),
                    serve.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `uraid check NAME --json`: the finished scrub's result.
    fn check(&self, name: &str) -> Value {
        let out = self.uraid(&["check", name, "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("check --json is not JSON ({e}): {out}"));
        assert_eq!(v["finished"], Value::Bool(true), "check did not finish: {v}");
        v
    }

    /// `uraid stop NAME`, then the serving process must exit 0.
    fn stop(&self, serve: &mut Serve) {
        self.uraid(&["stop", &serve.name]);
        let st = serve.wait_exit(HANG);
        assert!(st.success(), "uraid serve exited {st} after stop:\n{}", serve.log_text());
    }
}

fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    h.finish() as u32
}

/// The array is idle with every role in sync: no job, no missing role, `raid_disks` members
/// in_sync, nothing recovering.
fn fully_synced(d: &Value) -> bool {
    let raid_disks = d["raid_disks"].as_u64().unwrap_or(0) as usize;
    let devs = d["devices"].as_array().cloned().unwrap_or_default();
    let in_sync = devs.iter().filter(|x| x["state"] == "in_sync").count();
    let recovering = devs.iter().any(|x| x["state"] == "recovering" || x["state"] == "replacing");
    d["job"].is_null() && d["missing_roles"].as_array().is_some_and(|m| m.is_empty()) && in_sync == raid_disks && !recovering
}

/// A hot replace never degrades the array, whenever it is looked at: while the copy runs the
/// old member serves (in_sync) and the new one is being written (replacing); once it is over
/// the new one serves and the old one left ("replaced by"). Returns whether it is over.
fn replace_serves(d: &Value, old: &Path, new: &Path) -> bool {
    assert!(d["missing_roles"].as_array().is_some_and(|m| m.is_empty()), "hot replace degraded the array: {d}");
    match (device_state(d, old).as_str(), device_state(d, new).as_str()) {
        ("in_sync", "replacing") => false,
        ("faulty", "in_sync") => {
            let why = d["devices"].as_array().and_then(|v| v.iter().find(|x| x["device"] == p(old))).map(|x| x["failure"].clone());
            assert!(
                why.as_ref().and_then(|w| w.as_str()).is_some_and(|w| w.starts_with("replaced by")),
                "why the old member left: {why:?}"
            );
            true
        }
        (o, n) => panic!("hot replace: old member {o}, new one {n}; one of them must serve the role: {d}"),
    }
}

/// Whether every member's superblock (as the member files hold it now) says the array is
/// active, i.e. dirty, all at the same event count: a crash now owes a resync.
fn superblocks_say_dirty(env: &Env, members: &[PathBuf]) -> bool {
    let mut args = vec!["examine", "--json"];
    args.extend(members.iter().map(|m| p(m)));
    let out = env.uraid(&args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("examine --json is not JSON ({e}): {out}"));
    let sbs = v.as_array().unwrap_or_else(|| panic!("examine --json is not an array: {out}"));
    assert_eq!(sbs.len(), members.len(), "examine --json: {out}");
    sbs.iter().all(|e| e["state"] == "active" && e["events"] == sbs[0]["events"])
}

fn device_state(d: &Value, path: &Path) -> String {
    d["devices"]
        .as_array()
        .and_then(|v| v.iter().find(|x| x["device"] == p(path)))
        .map(|x| x["state"].as_str().unwrap_or("?").to_string())
        .unwrap_or_else(|| "absent".into())
}

// ---------------------------------------------------------------------------------------
// RAII guards
// ---------------------------------------------------------------------------------------

/// The `uraid serve` child: SIGKILLed and reaped when dropped (its log printed on panic).
struct Serve {
    child: Option<Child>,
    log: PathBuf,
    name: String,
}

impl Serve {
    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                self.child = None;
                return st;
            }
            if start.elapsed() > limit {
                panic!("uraid serve did not exit within {limit:?} (hung):\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn pid(&self) -> libc::pid_t {
        self.child.as_ref().expect("uraid serve running").id() as libc::pid_t
    }
    /// SIGSTOP, and wait until every thread of it has stopped: frozen, it changes nothing on
    /// its members until [`Serve::thaw`] or a kill.
    fn freeze(&mut self) {
        let pid = self.pid();
        // SAFETY: `pid` is our own child, not yet reaped (`child` still holds it).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP uraid serve");
        let start = Instant::now();
        loop {
            let mut status = 0;
            // SAFETY: as above; `status` is a valid place for the result. WUNTRACED reports
            // the stop once the whole thread group has stopped; std's own waits do not ask
            // for stops, so this takes nothing from them.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
            if r == pid && libc::WIFSTOPPED(status) {
                return;
            }
            assert_eq!(r, 0, "uraid serve ended instead of stopping (wait status {status:#x}):\n{}", self.log_text());
            assert!(start.elapsed() < HANG, "uraid serve did not stop within {HANG:?} of SIGSTOP (hung)");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    /// SIGCONT after [`Serve::freeze`].
    fn thaw(&mut self) {
        // SAFETY: as in `freeze`.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGCONT) }, 0, "SIGCONT uraid serve");
    }
    /// `kill -9`, and reap it.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL uraid serve");
            let st = c.wait().expect("reap uraid serve");
            assert!(!st.success(), "uraid serve exited normally before the kill: {st}");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- uraid serve log ({}) ---\n{}", self.log.display(), self.log_text());
        }
    }
}

fn is_mount_point(dir: &Path) -> bool {
    let Ok(canon) = dir.canonicalize() else {
        // A dead FUSE mount cannot even be stat'ed: look for the raw path.
        return mountinfo_has(&dir.to_string_lossy());
    };
    mountinfo_has(&canon.to_string_lossy())
}

fn mountinfo_has(path: &str) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// A kernel mount (the ext4 on the loop device): unmounted when dropped, lazily if busy.
struct MountGuard(Option<PathBuf>);
impl MountGuard {
    fn mount(dev: &str, dir: &Path) -> MountGuard {
        sh("mount", &[dev, p(dir)]);
        MountGuard(Some(dir.to_path_buf()))
    }
    /// Unmounts, waiting while the kernel still calls the mount busy: a file closed by a
    /// thread that then ended may be released a moment later (the last `fput` of an
    /// exiting task is deferred to a workqueue), and `umount` fails with "target is busy"
    /// in between (seen once on a loaded 2-core machine, right after the writer's join).
    /// An event waited for by polling; any other failure, or a mount busy for a minute,
    /// fails the test.
    fn umount(&mut self) {
        if let Some(dir) = self.0.take() {
            for _ in 0..600 {
                let out = Command::new("umount").arg(&dir).output().expect("run umount");
                if out.status.success() {
                    return;
                }
                if !String::from_utf8_lossy(&out.stderr).contains("busy") {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            sh("umount", &[p(&dir)]);
        }
    }
    fn umount_lazy(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = Command::new("umount").arg("-l").arg(&dir).status();
        }
    }
}
impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let ok = Command::new("umount").arg(&dir).status().map(|s| s.success()).unwrap_or(false);
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&dir).status();
            }
        }
    }
}

/// A loop device: detached when dropped.
struct LoopGuard(Option<String>);
impl LoopGuard {
    fn attach(file: &Path) -> LoopGuard {
        let dev = sh("losetup", &["--find", "--show", p(file)]).trim().to_string();
        assert!(dev.starts_with("/dev/loop"), "losetup said {dev:?}");
        LoopGuard(Some(dev))
    }
    fn dev(&self) -> &str {
        self.0.as_deref().expect("loop device attached")
    }
    fn detach(&mut self) {
        if let Some(dev) = self.0.take() {
            let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        }
    }
}
impl Drop for LoopGuard {
    fn drop(&mut self) {
        self.detach();
    }
}

/// The FUSE mount made by `uraid serve --fuse DIR`: if it is still mounted when dropped
/// (a failed test, a killed server), it is unmounted lazily.
struct FuseGuard(PathBuf);
impl FuseGuard {
    fn force_unmount(&self) {
        if is_mount_point(&self.0) {
            let fm = if have("fusermount3") { "fusermount3" } else { "fusermount" };
            let ok = Command::new(fm).arg("-u").arg("-z").arg(&self.0).status().map(|s| s.success()).unwrap_or(false);
            if !ok || is_mount_point(&self.0) {
                let _ = Command::new("umount").arg("-l").arg(&self.0).status();
            }
        }
    }
}
impl Drop for FuseGuard {
    fn drop(&mut self) {
        self.force_unmount();
    }
}

/// A stopped writer thread: joined (and its panic re-raised) when dropped.
struct JoinGuard(Option<std::thread::JoinHandle<()>>, Arc<AtomicBool>);
impl JoinGuard {
    fn join(&mut self) {
        if let Some(h) = self.0.take() {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(e);
            }
        }
    }
}
impl Drop for JoinGuard {
    fn drop(&mut self) {
        self.1.store(true, Ordering::Release);
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn sha256_file(path: &Path) -> [u8; 32] {
    let mut f = File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    h.finalize().into()
}

/// Writes a file; with `fsync`, fsyncs it and its directory (the name is durable too).
fn write_file(path: &Path, data: &[u8], fsync: bool) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(data)?;
    if fsync {
        f.sync_all()?;
        File::open(path.parent().expect("parent"))?.sync_all()?;
    }
    Ok(())
}

/// (path relative to the ext4 root, sha256)
type Manifest = Vec<(String, [u8; 32])>;

/// The writer's files still on disk, oldest first: (path, sha256, length).
type Live = std::collections::VecDeque<(String, [u8; 32], usize)>;

fn verify(root: &Path, files: &Manifest) {
    for (rel, sum) in files {
        let got = sha256_file(&root.join(rel));
        assert_eq!(&got, sum, "{rel}: content differs from what was written");
    }
}

/// The FUSE + loop + ext4 stack on a served array.
struct Stack {
    // Declared so that dropping a Stack unwinds in reverse order of acquisition.
    ext4: MountGuard,
    lo: LoopGuard,
    mnt: PathBuf,
}

impl Stack {
    fn attach(image: &Path, mnt: &Path, mkfs: bool) -> Stack {
        assert!(image.exists(), "FUSE file {} is missing", image.display());
        let lo = LoopGuard::attach(image);
        if mkfs {
            sh("mkfs.ext4", &["-q", "-F", lo.dev()]);
        }
        std::fs::create_dir_all(mnt).expect("mkdir mnt");
        let ext4 = MountGuard::mount(lo.dev(), mnt);
        Stack { ext4, lo, mnt: mnt.to_path_buf() }
    }

    /// The filesystem: every file intact, e2fsck clean, every file intact again after a
    /// remount; then unmounted and the loop device detached.
    fn fsck_and_detach(&mut self, files: &Manifest) {
        verify(&self.mnt, files);
        sh("sync", &[]);
        self.ext4.umount();
        sh("e2fsck", &["-fn", self.lo.dev()]);
        self.ext4 = MountGuard::mount(self.lo.dev(), &self.mnt);
        verify(&self.mnt, files);
        self.ext4.umount();
        self.lo.detach();
    }
}

// ---------------------------------------------------------------------------------------
// 1. NBD with real clients
// ---------------------------------------------------------------------------------------

#[test]
fn nbd_real_clients() {
    for tool in ["nbdinfo", "nbdcopy"] {
        skip_if!((!have(tool)).then(|| format!("{tool} is missing (libnbd-bin)")));
    }
    let t0 = Instant::now();
    let env = Env::new();
    let name = "r6nbd";
    let members = env.create("6", &["d0.img", "d1.img", "d2.img", "d3.img", "d4.img"], "16M", name, &[]);
    let sock = env.path("nbd.sock");
    let mut serve = env.serve(name, &members, &["--nbd", &format!("unix:{}", p(&sock))]);
    let d = env.detail(name);
    let size = d["size_bytes"].as_u64().expect("size_bytes");
    assert!(size > 32 << 20, "array of {size} bytes is smaller than expected");
    let uri = format!("nbd+unix:///{name}?socket={}", p(&sock));
    assert!(
        d["exports"].as_array().is_some_and(|e| e.iter().any(|x| x.as_str() == Some(&format!("nbd {uri}")))),
        "status does not list the NBD export {uri}: {}",
        d["exports"]
    );

    // nbdinfo: the export's name and exact size.
    let info = sh("nbdinfo", &[&uri]);
    assert!(info.contains(&format!("export=\"{name}\"")), "nbdinfo does not name the export:\n{info}");
    assert!(info.contains(&format!("export-size: {size}")), "nbdinfo size is not {size}:\n{info}");
    let listed = sh("nbdinfo", &["--list", &format!("nbd+unix://?socket={}", p(&sock))]);
    assert!(listed.contains(&format!("export=\"{name}\"")), "nbdinfo --list does not list {name}:\n{listed}");
    assert_eq!(sh("nbdinfo", &["--size", &uri]).trim(), size.to_string());

    // fio through its nbd engine (libnbd), if this fio has it: random writes, then verify.
    let fio_nbd =
        have("fio") && Command::new("sh").arg("-c").arg("fio --enghelp 2>&1 | grep -qw nbd").status().map(|s| s.success()).unwrap_or(false);
    if fio_nbd {
        let out = sh(
            "fio",
            &[
                "--name=nbdverify",
                "--ioengine=nbd",
                &format!("--uri={uri}"),
                "--rw=randwrite",
                "--bs=4k",
                "--size=16M",
                "--iodepth=16",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--verify_state_save=0",
                "--output-format=normal",
            ],
        );
        assert!(!out.contains("verify: bad"), "fio reported verify errors:\n{out}");
        println!("fio nbd verify job: ok");
    } else {
        println!("fio with the nbd engine is not installed; fio part skipped");
    }

    // nbdcopy a random image in (multi-conn by default) and out again.
    let image = env.path("image.bin");
    let mut rng = Prng::new(0x5eed_1234_abcd_0001);
    let data = rng.bytes(size as usize);
    let want = sha256(&data);
    std::fs::write(&image, &data).expect("write image");
    drop(data);
    sh("nbdcopy", &[p(&image), &uri]);
    let back = env.path("back.bin");
    sh("nbdcopy", &[&uri, p(&back)]);
    assert_eq!(std::fs::metadata(&back).expect("stat copy").len(), size);
    assert_eq!(sha256_file(&back), want, "nbdcopy out differs from what nbdcopy wrote in");

    if have("qemu-img") {
        let out = sh("qemu-img", &["compare", "-f", "raw", "-F", "raw", p(&image), &uri]);
        assert!(out.contains("identical"), "qemu-img compare: {out}");
    } else {
        println!("qemu-img is not installed; compare skipped");
    }

    // Stop, then the members alone (any order) hold the image.
    env.stop(&mut serve);
    let mut args = vec!["read".to_string()];
    args.extend([4, 2, 0, 3, 1].iter().map(|&i| p(&members[i]).to_string()));
    let out = run_limited(BIN, &args.iter().map(String::as_str).collect::<Vec<_>>(), &[], HANG);
    assert!(out.status.success(), "{}", describe("uraid", &["read", "..."], &out));
    assert_eq!(out.stdout.len() as u64, size);
    assert_eq!(sha256(&out.stdout), want, "uraid read of the stopped members differs from the image");
    println!("nbd_real_clients: {:.1} s", t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// 2./3. FUSE + loop + ext4: member failures while writing, spares, rebuild
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Action {
    /// Fail member number i.
    Fail(usize),
    /// Add spare number i.
    Add(usize),
    /// Hot-replace member number i by spare number j (`uraid replace`): the member keeps
    /// serving while it is copied.
    Replace(usize, usize),
}

struct FailureCase {
    name: &'static str,
    level: &'static str,
    members: usize,
    member_size: &'static str,
    extra_create: &'static [&'static str],
    spares: usize,
    /// (files written since the previous action, action), in order.
    schedule: &'static [(usize, Action)],
    /// Files the writer writes after the last action, at the least: it goes on until the
    /// rebuild is over too, so it overlaps the whole rebuild on any machine.
    write_after_files: usize,
}

/// A writer into the mounted filesystem: files of known sha256, each fsynced, so array
/// writes are in flight at every moment. It runs until `stop`; past `KEEP_BYTES` of live
/// data it deletes its oldest file before each new one, so the filesystem never fills up.
struct Writer {
    written: Arc<Mutex<Live>>,
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    writer: JoinGuard,
}

impl Writer {
    fn start(root: PathBuf) -> Writer {
        const KEEP_BYTES: usize = 20 << 20;
        let written: Arc<Mutex<Live>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (w, c, stop_w) = (written.clone(), count.clone(), stop.clone());
        let writer = JoinGuard(
            Some(std::thread::spawn(move || {
                let mut rng = Prng::new(0xabad_cafe_0000_0001);
                let mut live = 0usize;
                for i in 0.. {
                    if stop_w.load(Ordering::Acquire) {
                        return;
                    }
                    while live > KEEP_BYTES {
                        let (rel, _, len) = w.lock().unwrap().pop_front().expect("a file to delete");
                        std::fs::remove_file(root.join(&rel)).unwrap_or_else(|e| panic!("removing {rel}: {e}"));
                        live -= len;
                    }
                    let dir = format!("d{}", i % 4);
                    std::fs::create_dir_all(root.join(&dir)).expect("mkdir in ext4");
                    let len = 4096 * (4 + rng.below(64) as usize) + rng.below(4096) as usize;
                    let data = rng.bytes(len);
                    let rel = format!("{dir}/f{i:05}.bin");
                    write_file(&root.join(&rel), &data, true).unwrap_or_else(|e| panic!("writing {rel}: {e}"));
                    w.lock().unwrap().push_back((rel, sha256(&data), len));
                    live += len;
                    c.fetch_add(1, Ordering::AcqRel);
                }
            })),
            stop.clone(),
        );
        Writer { written, count, stop, writer }
    }
}

fn fuse_failure_and_rebuild(case: &FailureCase) {
    skip_if!(fuse_stack_unavailable());
    let t0 = Instant::now();
    let env = Env::new();
    let names: Vec<String> = (0..case.members).map(|i| format!("m{i}.img")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let members = env.create(case.level, &names, case.member_size, case.name, case.extra_create);
    let spares: Vec<PathBuf> = (0..case.spares).map(|i| env.spare(&format!("spare{i}.img"), &members[0])).collect();
    let fuse_dir = env.path("fuse");
    // Rebuilds are throttled (20 MB/s) so they take a while; the writer is kept going until
    // they are over, so it overlaps them whatever the machine's speed.
    let mut serve = env.serve(case.name, &members, &["--fuse", p(&fuse_dir), "--speed-max", "20000"]);
    let fuse = FuseGuard(fuse_dir.clone());
    let image = fuse_dir.join(format!("{}.img", case.name));
    let mut stack = Stack::attach(&image, &env.path("mnt"), true);

    let Writer { written, count, stop, mut writer } = Writer::start(stack.mnt.clone());
    let writer_running = |w: &JoinGuard| w.0.as_ref().is_some_and(|h| !h.is_finished());
    let mut last = 0;
    for &(at, action) in case.schedule {
        // `at` more files since the previous action, the writer still going.
        let start = Instant::now();
        while count.load(Ordering::Acquire) < last + at {
            assert!(writer_running(&writer), "writer stopped early");
            assert!(start.elapsed() < HANG, "writer hung: no file for {HANG:?} after {}", count.load(Ordering::Acquire));
            std::thread::sleep(Duration::from_millis(2));
        }
        let done = count.load(Ordering::Acquire);
        match action {
            Action::Fail(i) => {
                env.uraid(&["fail", case.name, p(&members[i])]);
                let d = env.detail(case.name);
                assert_eq!(device_state(&d, &members[i]), "faulty", "after fail: {d}");
                let failure =
                    d["devices"].as_array().and_then(|v| v.iter().find(|x| x["device"] == p(&members[i]))).map(|x| x["failure"].clone());
                assert_eq!(failure, Some(Value::from("failed by request")), "detail names why: {d}");
                println!("{}: failed {} after {done} files", case.name, names[i]);
            }
            Action::Replace(i, j) => {
                env.uraid(&["replace", case.name, p(&members[i]), "--with", p(&spares[j]), "--no-wait"]);
                // The copy may already be over (a fast machine): checked in both orders.
                let over = replace_serves(&env.detail(case.name), &members[i], &spares[j]);
                println!(
                    "{}: replacing {} by spare{j} after {done} files (copy {})",
                    case.name,
                    names[i],
                    if over { "already over" } else { "running" }
                );
            }
            Action::Add(i) => {
                env.uraid(&["add", case.name, p(&spares[i])]);
                println!("{}: added spare{i} after {done} files", case.name);
            }
        }
        assert!(writer_running(&writer), "writer stopped during {action:?}");
        last = count.load(Ordering::Acquire);
    }
    // Keep writing until the rebuild is over (and `write_after_files` more files are written):
    // the writes overlap the whole rebuild, however fast or slow it is. Every status seen on
    // the way must show a hot replace serving its role from one member or the other.
    let replaces: Vec<(usize, usize)> =
        case.schedule.iter().filter_map(|(_, a)| if let Action::Replace(i, j) = a { Some((*i, *j)) } else { None }).collect();
    let mut copy_seen_running = false;
    env.wait_for(case.name, "rebuild onto the spares, the writer still going", &mut serve, |d| {
        assert!(writer_running(&writer), "writer stopped during the rebuild");
        for &(i, j) in &replaces {
            copy_seen_running |= !replace_serves(d, &members[i], &spares[j]);
        }
        fully_synced(d) && count.load(Ordering::Acquire) >= last + case.write_after_files
    });
    stop.store(true, Ordering::Release);
    writer.join();
    let files: Manifest = written.lock().unwrap().iter().map(|(r, s, _)| (r.clone(), *s)).collect();
    println!("{}: {} files written, {} kept", case.name, count.load(Ordering::Acquire), files.len());
    if !replaces.is_empty() {
        println!("{}: copy {}", case.name, if copy_seen_running { "seen running in status" } else { "over before the first status" });
    }

    let d = env.wait_for(case.name, "rebuild onto the spares", &mut serve, fully_synced);
    for s in &spares {
        assert_eq!(device_state(&d, s), "in_sync", "spare {} after the rebuild: {d}", s.display());
    }
    for (_, action) in case.schedule {
        if let Action::Replace(i, _) = action {
            assert_eq!(device_state(&d, &members[*i]), "faulty", "replaced member after the copy: {d}");
            let why = d["devices"].as_array().and_then(|v| v.iter().find(|x| x["device"] == p(&members[*i]))).map(|x| x["failure"].clone());
            assert!(why.as_ref().and_then(|w| w.as_str()).is_some_and(|w| w.starts_with("replaced by")), "why: {why:?}");
        }
    }
    println!("{}: rebuilt at {:.1} s", case.name, t0.elapsed().as_secs_f64());

    stack.fsck_and_detach(&files);

    // Redundancy is consistent everywhere.
    let c = env.check(case.name);
    assert_eq!(c["mismatch_cnt"], 0, "check after the rebuild: {c}");
    let served_sum = sha256_file(&image);
    env.stop(&mut serve);
    drop(stack);
    drop(fuse);

    let failed: Vec<usize> = case
        .schedule
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Fail(i) | Action::Replace(i, _) => Some(*i),
            Action::Add(_) => None,
        })
        .collect();
    let mut now: Vec<&str> = (0..case.members).filter(|i| !failed.contains(i)).map(|i| p(&members[i])).collect();
    now.extend(spares.iter().map(|s| p(s)));
    // The stopped array from its current members alone (failed ones left out): the same
    // bytes as the FUSE file served before the stop.
    let mut args = vec!["read"];
    args.extend(now);
    let out = env.uraid_raw(&args);
    assert!(out.status.success(), "{}", describe("uraid", &args, &out));
    assert_eq!(sha256(&out.stdout), served_sum, "uraid read of the rebuilt members differs from the served image");
    println!("{}: {:.1} s", case.name, t0.elapsed().as_secs_f64());
}

#[test]
fn fuse_loop_ext4_raid6_hot_replace_under_load() {
    fuse_failure_and_rebuild(&FailureCase {
        name: "r6replace",
        level: "6",
        members: 5,
        member_size: "20M",
        extra_create: &[],
        spares: 1,
        schedule: &[(10, Action::Replace(2, 0))],
        write_after_files: 10,
    });
}

#[test]
fn fuse_loop_ext4_raid5_member_failure_and_rebuild() {
    fuse_failure_and_rebuild(&FailureCase {
        name: "r5fuse",
        level: "5",
        members: 4,
        member_size: "20M",
        extra_create: &[],
        spares: 1,
        schedule: &[(10, Action::Fail(1)), (10, Action::Add(0))],
        write_after_files: 10,
    });
}

#[test]
fn fuse_loop_ext4_raid6_two_member_failures_and_rebuild() {
    fuse_failure_and_rebuild(&FailureCase {
        name: "r6fuse",
        level: "6",
        members: 5,
        member_size: "16M",
        extra_create: &[],
        spares: 2,
        schedule: &[(8, Action::Fail(1)), (8, Action::Fail(3)), (8, Action::Add(0)), (4, Action::Add(1))],
        write_after_files: 10,
    });
}

#[test]
fn fuse_loop_ext4_raid10_member_failure_and_rebuild() {
    fuse_failure_and_rebuild(&FailureCase {
        name: "r10fuse",
        level: "10",
        members: 4,
        member_size: "32M",
        extra_create: &["--layout", "n2"],
        spares: 1,
        schedule: &[(10, Action::Fail(2)), (10, Action::Add(0))],
        write_after_files: 10,
    });
}

// ---------------------------------------------------------------------------------------
// 4. kill -9 in the middle of writes, then resync and fsck
// ---------------------------------------------------------------------------------------

/// md's migration story, online: a 2-member RAID1 holding a mounted ext4 (FUSE file, loop
/// device) becomes a RAID5 and grows to 3 members, then its chunk goes from 64K to 512K,
/// while files are written throughout; e2fsck is clean, every file reads back, the array
/// checks clean, and real md assembles the final members with the same bytes (when the md
/// VM is available; scripts/interop covers each step against md in any case).
#[test]
fn fuse_loop_ext4_raid1_becomes_raid5_grows_and_changes_chunk_while_mounted() {
    skip_if!(fuse_stack_unavailable());
    let env = Env::new();
    let name = "mig";
    let members: Vec<PathBuf> = ["m0.img", "m1.img"].iter().map(|n| env.path(n)).collect();
    env.uraid(&["create", "-l", "1", "-n", "2", "--size", "32M", "--name", name, p(&members[0]), p(&members[1])]);
    let spare = env.spare("m2.img", &members[0]);
    let fuse_dir = env.path("fuse");
    // md's speed_limit_min holds the reshape to 1 MB/s while the writer is busy; a higher
    // floor keeps the test short (the writer still overlaps every reshape: waited on below).
    let mut serve = env.serve(name, &members, &["--fuse", p(&fuse_dir), "--speed-min", "10000", "--speed-max", "20000"]);
    let fuse = FuseGuard(fuse_dir.clone());
    let image = fuse_dir.join(format!("{name}.img"));
    let mut stack = Stack::attach(&image, &env.path("mnt"), true);
    let Writer { written, count, stop, mut writer } = Writer::start(stack.mnt.clone());
    let wait_files = |n: usize| {
        let start = Instant::now();
        let target = count.load(Ordering::Acquire) + n;
        while count.load(Ordering::Acquire) < target {
            assert!(start.elapsed() < HANG, "writer hung");
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    wait_files(20);
    env.uraid(&["add", name, p(&spare)]);
    env.uraid(&["grow", name, "--level", "5", "--raid-devices", "3"]);
    let mut seen_reshaping = false;
    env.wait_for(name, "RAID5 over 3 members", &mut serve, |d| {
        seen_reshaping |= d["state"] == "reshaping";
        d["state"] != "reshaping" && d["level"] == "raid5" && d["raid_disks"] == 3
    });
    wait_files(20);
    env.uraid(&["grow", name, "--chunk", "512K"]);
    env.wait_for(name, "the 512K chunk", &mut serve, |d| {
        seen_reshaping |= d["state"] == "reshaping";
        d["state"] != "reshaping" && d["chunk_kib"] == 512
    });
    wait_files(20);
    assert!(seen_reshaping, "no status showed a reshape running");
    stop.store(true, Ordering::Release);
    writer.join();
    let files: Manifest = written.lock().unwrap().iter().map(|(r, s, _)| (r.clone(), *s)).collect();
    println!("{name}: {} files written, {} kept", count.load(Ordering::Acquire), files.len());
    stack.fsck_and_detach(&files);
    let c = env.check(name);
    assert_eq!(c["mismatch_cnt"], 0, "check after the reshapes: {c}");
    let served_sum = sha256_file(&image);
    env.stop(&mut serve);
    drop(stack);
    drop(fuse);
    let all = [p(&members[0]), p(&members[1]), p(&spare)];
    let out = env.uraid_raw(&[&["read"][..], &all[..]].concat());
    assert!(out.status.success(), "{}", describe("uraid", &["read"], &out));
    assert_eq!(sha256(&out.stdout), served_sum, "the stopped members hold what was served");
    if let Some(mdvm) = uraid_testkit::require_shared(&uraid_testkit::MDVM, "exports::migration (real md assembles the result)") {
        let hex: String = served_sum.iter().map(|b| format!("{b:02x}")).collect();
        let verify_images = mdvm.join("verify-images");
        let out = run_limited(p(&verify_images), &[&["--expect-sha256", &hex][..], &all[..]].concat(), &[], HANG);
        assert!(out.status.success(), "real md: {}", describe("verify-images", &[], &out));
    }
}

/// A served RAID0 gets a member more (`uraid grow NAME -n 4 --add DEV`, mdadm's --grow
/// --add): taken over as RAID4, reshaped while served, taken back as RAID0 at the end; the
/// content stays, the array grows by a member's worth, and real md assembles the result.
#[test]
fn a_served_raid0_gets_a_member_more() {
    let env = Env::new();
    let name = "stripes";
    let members: Vec<PathBuf> = ["r0.img", "r1.img", "r2.img"].iter().map(|n| env.path(n)).collect();
    env.uraid(&[
        "create",
        "-l",
        "0",
        "-n",
        "3",
        "-c",
        "64K",
        "--size",
        "16M",
        "--name",
        name,
        p(&members[0]),
        p(&members[1]),
        p(&members[2]),
    ]);
    let before = env.uraid_raw(&["read", p(&members[0]), p(&members[1]), p(&members[2])]).stdout;
    let content = Prng::new(7).bytes(before.len());
    let data = env.path("content");
    std::fs::write(&data, &content).unwrap();
    let out = Command::new(BIN)
        .args(["write", "-q", p(&members[0]), p(&members[1]), p(&members[2])])
        .stdin(File::open(&data).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let new = env.spare("r3.img", &members[0]);
    let mut serve = env.serve(name, &members, &[]);
    // Refused as offline: counts that do not match, --add on a change that is not a RAID0 grow.
    for (args, needle) in [(&["-n", "5"][..], "needs 2 new device"), (&["-n", "4", "--chunk", "128K"][..], "alone")] {
        let args: Vec<&str> = [&["grow", name][..], args, &["--add", p(&new)][..]].concat();
        let out = env.uraid_raw(&args);
        assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains(needle), "{}", describe("uraid", &args, &out));
    }
    env.uraid(&["grow", name, "-n", "4", "--add", p(&new)]);
    let done =
        env.wait_for(name, "a RAID0 of 4", &mut serve, |d| d["state"] != "reshaping" && d["level"] == "raid0" && d["raid_disks"] == 4);
    assert_eq!(done["size_bytes"].as_u64(), Some(before.len() as u64 / 3 * 4), "{done}");
    env.stop(&mut serve);
    let all = [p(&members[0]), p(&members[1]), p(&members[2]), p(&new)];
    let out = env.uraid_raw(&[&["read"][..], &all[..]].concat());
    assert!(out.status.success(), "{}", describe("uraid", &["read"], &out));
    assert!(out.stdout.len() == content.len() / 3 * 4 && out.stdout[..content.len()] == content[..], "content after the served RAID0 grow");
    if let Some(mdvm) = uraid_testkit::require_shared(&uraid_testkit::MDVM, "exports::served RAID0 grow (real md assembles the result)") {
        let hex: String = sha256(&out.stdout).iter().map(|b| format!("{b:02x}")).collect();
        let out = run_limited(p(&mdvm.join("verify-images")), &[&["--expect-sha256", &hex][..], &all[..]].concat(), &[], HANG);
        assert!(out.status.success(), "real md: {}", describe("verify-images", &[], &out));
    }
}

#[test]
fn crash_kill9_then_resync() {
    skip_if!(fuse_stack_unavailable());
    let t0 = Instant::now();
    let env = Env::new();
    let name = "r5crash";
    let members = env.create("5", &["c0.img", "c1.img", "c2.img", "c3.img"], "20M", name, &[]);
    let fuse_dir = env.path("fuse");
    let mut serve = env.serve(name, &members, &["--fuse", p(&fuse_dir)]);
    let fuse = FuseGuard(fuse_dir.clone());
    let image = fuse_dir.join(format!("{name}.img"));
    let mut stack = Stack::attach(&image, &env.path("mnt"), true);
    let root = stack.mnt.clone();

    // Durable before the crash: a batch followed by `sync`, then files fsynced one by one.
    let mut rng = Prng::new(0x0dd_ba11_cafe_0001);
    let mut durable: Manifest = Vec::new();
    std::fs::create_dir(root.join("synced")).expect("mkdir");
    for i in 0..8 {
        let data = {
            let n = 3000 + rng.below(400_000) as usize;
            rng.bytes(n)
        };
        let rel = format!("synced/s{i}.bin");
        write_file(&root.join(&rel), &data, false).expect("write");
        durable.push((rel, sha256(&data)));
    }
    sh("sync", &[]);
    std::fs::create_dir(root.join("fsynced")).expect("mkdir");
    File::open(&root).and_then(|f| f.sync_all()).expect("fsync root");
    for i in 0..6 {
        let data = {
            let n = 1 + rng.below(600_000) as usize;
            rng.bytes(n)
        };
        let rel = format!("fsynced/f{i}.bin");
        write_file(&root.join(&rel), &data, true).expect("write + fsync");
        durable.push((rel, sha256(&data)));
    }

    // Then a writer that keeps going: mostly unsynced files, every third one fsynced (and
    // recorded as durable once its fsync returned). Errors end it: the server will die.
    std::fs::create_dir(root.join("live")).expect("mkdir");
    File::open(&root).and_then(|f| f.sync_all()).expect("fsync root");
    let fsynced_live: Arc<Mutex<Manifest>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writer = {
        let (fsynced_live, count, stop_w, root) = (fsynced_live.clone(), count.clone(), stop.clone(), root.clone());
        JoinGuard(
            Some(std::thread::spawn(move || {
                let mut rng = Prng::new(0x1234_5678_9abc_def1);
                for i in 0.. {
                    if stop_w.load(Ordering::Acquire) {
                        return;
                    }
                    let data = {
                        let n = 4096 + rng.below(700_000) as usize;
                        rng.bytes(n)
                    };
                    let rel = format!("live/l{i:04}.bin");
                    let fsync = i % 3 == 2;
                    if write_file(&root.join(&rel), &data, fsync).is_err() {
                        return;
                    }
                    if fsync {
                        fsynced_live.lock().unwrap().push((rel, sha256(&data)));
                    }
                    count.fetch_add(1, Ordering::AcqRel);
                }
            })),
            stop.clone(),
        )
    };
    // kill -9 while the array is dirty, as a crash in the middle of writes leaves it. Left
    // running, the server marks the array clean after 200 ms without a write, which a slow or
    // busy machine can give it at any moment, and then no resync would be owed. So it is
    // frozen (SIGSTOP) first, and killed only once every member's superblock says "active":
    // frozen, it cannot mark the array clean between that check and the kill. Otherwise it
    // is thawed, and tried again after a few more files.
    let (start, mut want, mut tries) = (Instant::now(), 12, 0);
    loop {
        while count.load(Ordering::Acquire) < want {
            assert!(writer.0.as_ref().is_some_and(|h| !h.is_finished()), "writer stopped early");
            assert!(start.elapsed() < HANG, "writer hung: no file for {HANG:?} after {}", count.load(Ordering::Acquire));
            std::thread::sleep(Duration::from_millis(2));
        }
        serve.freeze();
        tries += 1;
        if superblocks_say_dirty(&env, &members) {
            break;
        }
        serve.thaw();
        // At least one more fsynced file (every third one is): the array is written again.
        want = count.load(Ordering::Acquire) + 3;
    }
    println!("{name}: array dirty at the kill (frozen {tries} time(s) to catch it so)");
    // kill -9 while holding the writer's list: whatever is in it was fsynced before the kill.
    let killed_at;
    {
        let list = fsynced_live.lock().unwrap();
        killed_at = count.load(Ordering::Acquire);
        serve.kill9();
        durable.extend(list.iter().cloned());
    }
    stop.store(true, Ordering::Release);
    println!("{name}: kill -9 after {killed_at} live files ({} of them fsynced)", durable.len() - 14);
    writer.join();

    // The stack over the dead FUSE mount comes down lazily.
    stack.ext4.umount_lazy();
    stack.lo.detach();
    fuse.force_unmount();
    assert!(!is_mount_point(&fuse_dir), "dead FUSE mount still present");
    drop(stack);
    drop(fuse);

    // Serve again: the array was dirty, so it resyncs (throttled so it can be seen; if it is
    // over before the first status, the serve log says it ran).
    let fuse_dir2 = env.path("fuse2");
    let mut serve = env.serve(name, &members, &["--fuse", p(&fuse_dir2), "--speed-max", "20000"]);
    let fuse2 = FuseGuard(fuse_dir2.clone());
    // The status shows the running job; once it is over, the serve log says so.
    let log = serve.log.clone();
    let log_says_resync = || std::fs::read_to_string(&log).unwrap_or_default().contains("resync finished");
    let (mut saw_resync, mut seen_running) = (false, false);
    env.wait_for(name, "resync after the crash", &mut serve, |d| {
        seen_running |= d["job"]["kind"] == "resync";
        saw_resync |= seen_running || log_says_resync();
        saw_resync && fully_synced(d)
    });
    println!("{name}: resync {} after restart", if seen_running { "seen running in status" } else { "reported in the serve log" });
    env.wait_for(name, "clean state after the resync", &mut serve, |d| d["state"] == "clean");

    // fsck: replaying the journal (and fixing what the crash left) is allowed once, then the
    // filesystem must be clean; every file made durable before the kill is intact.
    let image2 = fuse_dir2.join(format!("{name}.img"));
    let mut lo = LoopGuard::attach(&image2);
    let fsck = run_limited("e2fsck", &["-fy", lo.dev()], &[], HANG);
    let code = fsck.status.code().unwrap_or(-1);
    println!("{name}: e2fsck -fy exit {code}\n{}", String::from_utf8_lossy(&fsck.stdout));
    assert!((0..4).contains(&code), "{}", describe("e2fsck", &["-fy", lo.dev()], &fsck));
    sh("e2fsck", &["-fn", lo.dev()]);
    let mnt2 = env.path("mnt2");
    std::fs::create_dir(&mnt2).expect("mkdir");
    let mut ext4 = MountGuard::mount(lo.dev(), &mnt2);
    verify(&mnt2, &durable);
    ext4.umount();
    lo.detach();

    let c = env.check(name);
    assert_eq!(c["mismatch_cnt"], 0, "check after the resync: {c}");
    env.stop(&mut serve);
    drop(fuse2);
    println!("{name}: {} durable files intact; {:.1} s", durable.len(), t0.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------------------
// Bad sectors on NBD members, healed under fio (issue 15's end-to-end check)
// ---------------------------------------------------------------------------------------

/// An nbdkit `sh` plugin script emulating a disk with latent bad sectors, the way disks
/// have them: while the file `on` exists, a read touching a range listed in `bad` (byte
/// `start end` per line) fails with EIO, and a write covering a whole listed range remaps it
/// (removes it from the list). Requests are serialized (the sh plugin's default).
fn bad_sector_disk(dir: &Path, size: u64) -> PathBuf {
    std::fs::create_dir_all(dir).expect("disk dir");
    let img = dir.join("disk.img");
    File::create(&img).and_then(|f| f.set_len(size)).expect("disk image");
    std::fs::write(dir.join("bad"), b"").expect("bad list");
    let script = dir.join("disk.sh");
    let d = p(dir);
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/bash
img={d}/disk.img; bad={d}/bad; on={d}/on
case "$1" in
  get_size) stat -c %s "$img" ;;
  can_write|can_flush) exit 0 ;;
  pread)
    if [ -e "$on" ]; then
      end=$(($4 + $3))
      while read -r s e; do
        if [ "$s" -lt "$end" ] && [ "$4" -lt "$e" ]; then echo "EIO latent sector error" >&2; exit 1; fi
      done < "$bad"
    fi
    dd if="$img" iflag=skip_bytes,count_bytes skip="$4" count="$3" bs=64K status=none ;;
  pwrite)
    dd of="$img" oflag=seek_bytes seek="$4" conv=notrunc iflag=fullblock bs=64K status=none || exit 1
    # Only while the faults are on: the test writes the list before it switches them on,
    # and a background write (a clean mark) must not rewrite the list meanwhile.
    if [ -e "$on" ]; then
      end=$(($4 + $3))
      awk -v o="$4" -v e="$end" '!($1 >= o && $2 <= e)' "$bad" > "$bad.new" && mv "$bad.new" "$bad"
    fi ;;
  flush) sync "$img" ;;
  *) exit 2 ;;
esac
"#
        ),
    )
    .expect("script");
    sh("chmod", &["+x", p(&script)]);
    script
}

fn bad_ranges_left(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("bad")).expect("bad list").lines().filter(|l| !l.trim().is_empty()).count()
}

fn fio_nbd_available() -> bool {
    have("fio") && Command::new("sh").arg("-c").arg("fio --enghelp 2>&1 | grep -qw nbd").status().is_ok_and(|s| s.success())
}

/// fio through uraid's NBD export: sequential 64 KiB writes over `size`, then (with
/// `verify_only`) only the verify pass of that same job.
fn fio_verify(uri: &str, size: &str, verify_only: bool) {
    fio_verify_seeded(uri, size, verify_only, 1)
}

/// [`fio_verify`] with fio's `randseed` (which also makes the data written).
fn fio_verify_seeded(uri: &str, size: &str, verify_only: bool, seed: u64) {
    let mut args = vec![
        format!("--randseed={seed}"),
        "--name=heal".to_string(),
        "--ioengine=nbd".into(),
        format!("--uri={uri}"),
        "--rw=write".into(),
        "--bs=64k".into(),
        format!("--size={size}"),
        "--iodepth=8".into(),
        "--verify=crc32c".into(),
        "--do_verify=1".into(),
        "--verify_fatal=1".into(),
        "--verify_state_save=0".into(),
    ];
    if verify_only {
        args.push("--verify_only=1".into());
    }
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_limited("fio", &a, &[], Duration::from_secs(600));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("verify: bad"), "fio verify failed:\n{}", describe("fio", &a, &out));
}

fn member<'a>(d: &'a Value, uri: &str) -> &'a Value {
    d["devices"].as_array().and_then(|v| v.iter().find(|m| m["device"].as_str() == Some(uri))).unwrap_or_else(|| panic!("{uri} not in {d}"))
}

/// An array over nbdkit members, created (64K chunks, `--assume-clean`) and served with an
/// NBD export on a unix socket: the rig of the fault tests below.
struct NbdkitArray {
    kits: Vec<uraid_testkit::nbdkit::Nbdkit>,
    uris: Vec<String>,
    serve: Serve,
    export: String,
}

/// Member `i` is served by nbdkit with `member_args(i)`; `serve_args` go to `uraid serve`.
fn nbdkit_array(
    env: &Env,
    name: &str,
    level: &str,
    disks: usize,
    serve_args: &[&str],
    member_args: impl Fn(usize) -> Vec<String>,
) -> NbdkitArray {
    let kits: Vec<uraid_testkit::nbdkit::Nbdkit> = (0..disks)
        .map(|i| {
            let args = member_args(i);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            uraid_testkit::nbdkit::Nbdkit::start(&env.path(&format!("m{i}.sock")), &args)
        })
        .collect();
    let uris: Vec<String> = kits.iter().map(|k| k.uri()).collect();
    let n = disks.to_string();
    let mut create = vec!["create", "-l", level, "-n", &n, "-c", "64K", "--assume-clean", "--name", name];
    create.extend(uris.iter().map(String::as_str));
    env.uraid(&create);
    let sock = env.path("nbd.sock");
    let members: Vec<PathBuf> = uris.iter().map(PathBuf::from).collect();
    let nbd = format!("unix:{}", p(&sock));
    let mut args = vec!["--nbd", &nbd];
    args.extend_from_slice(serve_args);
    let serve = env.serve(name, &members, &args);
    let export = format!("nbd+unix:///{name}?socket={}", p(&sock));
    NbdkitArray { kits, uris, serve, export }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn nbd_members_heal_a_burst_of_read_errors_under_fio_and_fail_past_the_limit() {
    skip_if!((!uraid_testkit::nbdkit::available("exports: bad sectors on NBD members")).then(|| "nbdkit is missing".to_string()));
    skip_if!((!fio_nbd_available()).then(|| "fio with the nbd engine is missing".to_string()));
    for (level, disks, max_read_errors, bursts) in [("5", 4, 20, 6), ("6", 5, 20, 6), ("5", 4, 2, 6)] {
        let env = Env::new();
        let name = format!("heal{level}x{max_read_errors}");
        let size = 24u64 << 20;
        let dirs: Vec<PathBuf> = (0..disks).map(|i| env.path(&format!("disk{i}"))).collect();
        let limit = max_read_errors.to_string();
        let NbdkitArray { kits, uris, mut serve, export } = nbdkit_array(&env, &name, level, disks, &["--max-read-errors", &limit], |i| {
            let script = bad_sector_disk(&dirs[i], size);
            strings(&["sh", p(&script)])
        });
        let examined: Value = serde_json::from_str(&env.uraid(&["examine", &uris[1], "--json"])).expect("examine json");
        let data_offset =
            examined[0]["data_offset_sectors"].as_u64().or_else(|| examined["data_offset_sectors"].as_u64()).expect("data offset") * 512;
        fio_verify(&export, "8M", false);

        // A burst of latent errors on member 1, inside what fio wrote (its first 8 MiB of
        // array data span at least the first 2 MiB of each member's data).
        let ranges: String =
            (0..bursts).map(|k| format!("{} {}\n", data_offset + k * (256 << 10), data_offset + k * (256 << 10) + 4096)).collect();
        std::fs::write(dirs[1].join("bad"), ranges).unwrap();
        std::fs::write(dirs[1].join("on"), b"").unwrap();
        fio_verify(&export, "8M", true);
        let d = env.detail(&name);
        let m1 = member(&d, &uris[1]);
        if max_read_errors >= bursts as u32 {
            assert_eq!(m1["state"], "in_sync", "raid{level}: a burst under the limit keeps the member: {m1}");
            assert!(m1["read_errors_corrected"].as_u64().unwrap_or(0) > 0, "raid{level}: {m1}");
            // A scrub reaches what fio's reads did not (parity blocks); after it the
            // member reads clean: a second scrub sees no new error.
            env.check(&name);
            assert_eq!(bad_ranges_left(&dirs[1]), 0, "raid{level}: every bad range was rewritten");
            let seen = member(&env.detail(&name), &uris[1])["read_errors"].as_u64();
            env.check(&name);
            assert_eq!(member(&env.detail(&name), &uris[1])["read_errors"].as_u64(), seen, "raid{level}: no error left");
        } else {
            // Past the limit: the member is failed, the array keeps serving, fio still
            // verifies every block.
            assert_eq!(m1["state"], "faulty", "raid{level}: past max_read_errors the member is failed: {m1}");
            fio_verify(&export, "8M", true);
        }
        env.stop(&mut serve);
        drop(kits);
    }
}

/// Issue 15's end-to-end acceptance with nbdkit's own `error` filter: while its error file
/// exists every read of member 1 fails with EIO (so the rewrite's re-read fails too, and md
/// would list the range in its bad-block log); the burst is bounded by what fio reads
/// meanwhile, which the layout decides, not the clock.
#[test]
fn nbdkit_error_filter_read_burst_is_listed_then_healed_and_past_the_limit_fails_the_member() {
    skip_if!((!uraid_testkit::nbdkit::available("exports: nbdkit read-error burst")).then(|| "nbdkit is missing".to_string()));
    skip_if!((!fio_nbd_available()).then(|| "fio with the nbd engine is missing".to_string()));
    // (level, disks, max_read_errors, array bytes fio reads during the burst)
    for (level, disks, limit, burst) in [("5", 4, 20u64, "512K"), ("6", 5, 20, "512K"), ("5", 4, 2, "2M")] {
        let env = Env::new();
        let name = format!("burst{level}x{limit}");
        let on = env.path("errors-on");
        let max = limit.to_string();
        let NbdkitArray { kits, uris, mut serve, export } = nbdkit_array(&env, &name, level, disks, &["--max-read-errors", &max], |i| {
            if i == 1 {
                // Every read fails with EIO while `errors-on` exists.
                let rf = format!("error-pread-file={}", p(&on));
                strings(&["--filter=error", "memory", "24M", "error-pread=EIO", "error-pread-rate=100%", &rf])
            } else {
                strings(&["memory", "24M"])
            }
        });
        fio_verify(&export, "8M", false);

        std::fs::write(&on, b"").unwrap();
        fio_verify(&export, burst, true);
        std::fs::remove_file(&on).unwrap();
        let m1 = member(&env.detail(&name), &uris[1]).clone();
        let errors = m1["read_errors"].as_u64().unwrap_or(0);
        assert!(errors > 0, "raid{level}: the burst reached member 1: {m1}");
        let past_limit = limit == 2;
        assert_eq!(errors > limit, past_limit, "raid{level}: {errors} read errors in the burst against max_read_errors {limit}");
        if !past_limit {
            // Under the limit: the member stays, the ranges whose rewrite could not be
            // read back are listed; once the disk reads again, the next full read rebuilds,
            // rewrites and clears them.
            assert_eq!(m1["state"], "in_sync", "raid{level}: {m1}");
            assert!(!m1["bad_blocks"].as_array().is_some_and(|b| b.is_empty()), "raid{level}: the failed re-reads are listed: {m1}");
            fio_verify(&export, "8M", true);
            let m1 = member(&env.detail(&name), &uris[1]).clone();
            assert!(m1["read_errors_corrected"].as_u64().unwrap_or(0) > 0, "raid{level}: {m1}");
            assert_eq!(m1["bad_blocks"].as_array().map(Vec::len), Some(0), "raid{level}: healed: {m1}");
            // A later full read of the array, and a scrub (every block of every member),
            // find no error.
            fio_verify(&export, "8M", true);
            env.check(&name);
            let after = member(&env.detail(&name), &uris[1]).clone();
            assert_eq!(after["read_errors"], m1["read_errors"], "raid{level}: no error left: {after}");
            assert_eq!(after["state"], "in_sync");
        } else {
            // Past the limit: failed; the array keeps serving and fio verifies every block.
            assert_eq!(m1["state"], "faulty", "raid{level}: past max_read_errors the member is failed: {m1}");
            fio_verify(&export, "8M", true);
        }
        env.stop(&mut serve);
        drop(kits);
    }
}

#[test]
fn nbdkit_error_filter_faults_on_two_raid6_members_under_fio() {
    skip_if!((!uraid_testkit::nbdkit::available("exports: nbdkit faults under fio")).then(|| "nbdkit is missing".to_string()));
    skip_if!((!fio_nbd_available()).then(|| "fio with the nbd engine is missing".to_string()));
    let env = Env::new();
    let name = "faulty6";
    let on = env.path("errors-on");
    let faulty = [1usize, 3];
    let NbdkitArray { kits, uris, mut serve, export } = nbdkit_array(&env, name, "6", 5, &[], |i| {
        if faulty.contains(&i) {
            // Random read and write errors (EIO), only while `errors-on` exists.
            let (rf, wf) = (format!("error-pread-file={}", p(&on)), format!("error-pwrite-file={}", p(&on)));
            strings(&["--filter=error", "memory", "24M", "error=EIO", "error-pread-rate=10%", "error-pwrite-rate=10%", &rf, &wf])
        } else {
            strings(&["memory", "24M"])
        }
    });
    std::fs::write(&on, b"").unwrap();
    // The array keeps serving and fio verifies every block it wrote.
    fio_verify(&export, "16M", false);
    fio_verify(&export, "16M", true);
    let d = env.detail(name);
    assert_ne!(d["state"], "failed", "two faulty members are within RAID6's redundancy: {d}");
    for i in faulty {
        let m = member(&d, &uris[i]);
        let listed = m["bad_blocks"].as_array().is_some_and(|b| !b.is_empty());
        let hit = m["state"] == "faulty" || m["read_errors"].as_u64().unwrap_or(0) > 0 || listed;
        assert!(hit, "member {i} had errors injected, and detail shows it failed, counting read errors or listing bad blocks: {m}");
    }
    for i in [0usize, 2, 4] {
        assert_eq!(member(&d, &uris[i])["state"], "in_sync", "member {i} had no fault: {d}");
    }
    std::fs::remove_file(&on).unwrap();
    env.stop(&mut serve);
    drop(kits);
}

#[test]
fn an_nbd_member_whose_server_goes_away_is_failed_then_re_added_when_it_returns() {
    skip_if!((!uraid_testkit::nbdkit::available("exports: NBD member re-add")).then(|| "nbdkit is missing".to_string()));
    skip_if!((!fio_nbd_available()).then(|| "fio with the nbd engine is missing".to_string()));
    let env = Env::new();
    let name = "comeback";
    let mut kits: Vec<uraid_testkit::nbdkit::Nbdkit> = (0..3)
        .map(|i| {
            let img = env.path(&format!("host{i}.img"));
            File::create(&img).and_then(|f| f.set_len(24 << 20)).expect("image");
            uraid_testkit::nbdkit::Nbdkit::start(&env.path(&format!("m{i}.sock")), &["file", &format!("file={}", p(&img))])
        })
        .collect();
    let uris: Vec<String> = kits.iter().map(|k| k.uri()).collect();
    let mut create =
        vec!["create", "-l", "5", "-n", "3", "-c", "64K", "--assume-clean", "--bitmap", "internal", "--bitmap-chunk", "1M", "--name", name];
    create.extend(uris.iter().map(String::as_str));
    env.uraid(&create);
    let sock = env.path("nbd.sock");
    let members: Vec<PathBuf> = uris.iter().map(PathBuf::from).collect();
    let mut serve = env.serve(name, &members, &["--nbd", &format!("unix:{}", p(&sock)), "--member-failfast", "1"]);
    let export = format!("nbd+unix:///{name}?socket={}", p(&sock));
    fio_verify_seeded(&export, "8M", false, 1);

    // Member 1's server goes away while fio writes: after the failfast second its member is
    // failed, and the array carries on degraded.
    kits[1].kill();
    fio_verify_seeded(&export, "8M", false, 2);
    let d = env.detail(name);
    assert_eq!(member(&d, &uris[1])["state"], "faulty", "{d}");

    // The server comes back (its disk kept what it had): the member is re-added and caught
    // up from the bitmap, with no command.
    kits[1].restart();
    env.wait_for(name, "member 1 re-added and in sync", &mut serve, |d| {
        member(d, &uris[1])["state"] == "in_sync"
            && d["devices"].as_array().is_some_and(|v| v.iter().filter(|m| m["state"] == "in_sync").count() == 3)
    });
    fio_verify_seeded(&export, "8M", true, 2);
    let check = env.check(name);
    assert_eq!(check["mismatch_cnt"], 0, "{check}");
    env.stop(&mut serve);
}
