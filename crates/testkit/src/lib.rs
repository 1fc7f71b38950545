//! Test-only helpers shared by every crate's tests.
//!
//! Why a crate: the checks that matter most (the real-md corpus, the md VM) depend on
//! `../shared`, which a checkout may lack. A test that silently passes when its input is
//! missing turns CI green while the check never ran. So every such test goes through
//! [`require_shared`]:
//! - with `CI` set, a missing input is a failure that names what is missing and where;
//! - without `CI`, the test is reported as skipped: a `SKIPPED:` line on stdout and a line in
//!   the skip ledger (`$URAID_SKIP_LEDGER`, set by `scripts/test`), which `scripts/test`
//!   prints in its closing summary.
// `unsafe` only in `bounded_alloc` (a GlobalAlloc must be an unsafe impl).
#![deny(unsafe_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

/// True when the `CI` environment variable is set to anything but empty, `0` or `false`
/// (GitHub Actions, GitLab and this project's `.ci/run` environment all set `CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// The workspace root (this crate lives in `crates/testkit`).
pub fn workspace_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.parent().and_then(Path::parent).map_or_else(|| crate_dir.join("../.."), Path::to_path_buf)
}

/// Records a skipped test: a `SKIPPED:` line, and a line in the ledger `scripts/test` reads.
pub fn skip(test: &str, why: &str) {
    println!("SKIPPED: {test}: {why}");
    if let Some(ledger) = std::env::var_os("URAID_SKIP_LEDGER") {
        // One write() of the whole line on an O_APPEND file: lines from parallel test
        // threads and processes never interleave (a formatted write would issue a syscall
        // per fragment). A lost line would only shorten the summary, never turn a failure
        // into a pass.
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(ledger) {
            let _ = f.write_all(format!("{test}: {why}\n").as_bytes());
        }
    }
}

/// What a test needs from `../shared` (or the override in `env_override`), with the file
/// that proves it is there.
pub struct SharedInput {
    /// e.g. `md-corpus`
    pub name: &'static str,
    /// An environment variable that points elsewhere, e.g. `URAID_MD_CORPUS`.
    pub env_override: &'static str,
    /// A file inside that must exist, e.g. `index.json`.
    pub marker: &'static str,
}

/// The real-md corpus: arrays made by Linux md, with manifests.
pub const MD_CORPUS: SharedInput = SharedInput { name: "md-corpus", env_override: "URAID_MD_CORPUS", marker: "index.json" };
/// Arrays real md left in the middle of a reshape, with manifests.
pub const MD_CORPUS_RESHAPE: SharedInput =
    SharedInput { name: "md-corpus-reshape", env_override: "URAID_MD_CORPUS_RESHAPE", marker: "README.md" };
/// The md VM (real Linux md and mdadm in qemu).
pub const MDVM: SharedInput = SharedInput { name: "mdvm", env_override: "MDVM_DIR", marker: "verify-images" };

impl SharedInput {
    /// Where it would be: the override, else `../shared/NAME` beside the workspace.
    pub fn path(&self) -> PathBuf {
        std::env::var_os(self.env_override).map(PathBuf::from).unwrap_or_else(|| {
            let root = workspace_root();
            root.parent().unwrap_or(&root).join("shared").join(self.name)
        })
    }
}

/// Why `input` cannot be used, or `None` when it is there.
pub fn missing_reason(input: &SharedInput) -> Option<String> {
    let dir = input.path();
    (!dir.join(input.marker).exists()).then(|| {
        format!(
            "{} not found ({} missing at {}); put the project's shared/ folder beside the checkout or set {}",
            input.name,
            input.marker,
            dir.display(),
            input.env_override
        )
    })
}

/// The directory of `input`, or `None` after recording `test` as skipped. Under `CI` a
/// missing input panics with a message that names it, where it was looked for and how to
/// provide it.
pub fn require_shared(input: &SharedInput, test: &str) -> Option<PathBuf> {
    let Some(why) = missing_reason(input) else { return Some(input.path()) };
    if in_ci() {
        panic!("CI is set and this check cannot run: {why}");
    }
    skip(test, &why);
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_input_is_named_with_its_path_and_the_fix() {
        let missing = SharedInput { name: "nothing-here", env_override: "URAID_TESTKIT_NO_SUCH_VAR", marker: "x" };
        let why = missing_reason(&missing).expect("it is missing");
        assert!(why.contains("nothing-here") && why.contains("shared/nothing-here") && why.contains("URAID_TESTKIT_NO_SUCH_VAR"), "{why}");
        // A directory that exists with its marker is found.
        let dir = std::env::temp_dir().join(format!("uraid-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("x"), b"").unwrap();
        // This variable is private to this test, so setting it races nothing.
        std::env::set_var("URAID_TESTKIT_PRESENT_VAR", &dir);
        let present = SharedInput { name: "present", env_override: "URAID_TESTKIT_PRESENT_VAR", marker: "x" };
        assert_eq!(missing_reason(&present), None);
        assert_eq!(require_shared(&present, "t"), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Running commands from tests: with a hang guard, output captured.
pub mod process {
    use std::path::Path;
    use std::process::{Command, Output, Stdio};
    use std::time::{Duration, Instant};

    /// A command, its exit and both outputs, for a failure message.
    pub fn describe(cmd: &str, args: &[&str], out: &Output) -> String {
        format!(
            "`{cmd} {}` exited {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Runs a command with stdin empty and a hang guard (killed after `limit`, then a panic
    /// that says it hung), capturing its output.
    pub fn run_limited(cmd: &str, args: &[&str], envs: &[(&str, &Path)], limit: Duration) -> Output {
        run_limited_in(cmd, args, envs, None, limit)
    }

    /// [`run_limited`] in directory `dir` (when given).
    pub fn run_limited_in(cmd: &str, args: &[&str], envs: &[(&str, &Path)], dir: Option<&Path>, limit: Duration) -> Output {
        let mut c = Command::new(cmd);
        c.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(d) = dir {
            c.current_dir(d);
        }
        for (k, v) in envs {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap_or_else(|e| panic!("spawning {cmd}: {e}"));
        // Drain the pipes on threads so a chatty command cannot block on a full pipe.
        let mut so = child.stdout.take().expect("stdout");
        let mut se = child.stderr.take().expect("stderr");
        let t_out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut so, &mut v);
            v
        });
        let t_err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = std::io::Read::read_to_end(&mut se, &mut v);
            v
        });
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if start.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`{cmd} {}` hung: not finished after {limit:?}", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        Output { status, stdout: t_out.join().unwrap_or_default(), stderr: t_err.join().unwrap_or_default() }
    }
}

/// A global allocator for tests that feed hostile input: any single allocation above
/// `LIMIT` bytes aborts the test binary with a line saying so, so "a crafted superblock
/// makes us allocate gigabytes" is a failure, not a slow pass (or an OOM kill). Use:
/// `#[global_allocator] static A: uraid_testkit::BoundedAlloc<{ 64 << 20 }> = uraid_testkit::BoundedAlloc;`
pub struct BoundedAlloc<const LIMIT: usize>;

#[allow(unsafe_code)]
mod bounded_alloc {
    use super::BoundedAlloc;
    use std::alloc::{GlobalAlloc, Layout, System};

    /// Says why the process is about to abort (formatting to stderr does not allocate).
    fn oversize(size: usize, limit: usize) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "test allocator: refused an allocation of {size} bytes (limit {limit})");
    }

    // SAFETY: forwards to the system allocator; refusing (null) is allowed by `GlobalAlloc`.
    unsafe impl<const LIMIT: usize> GlobalAlloc for BoundedAlloc<LIMIT> {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if layout.size() > LIMIT {
                oversize(layout.size(), LIMIT);
                return std::ptr::null_mut();
            }
            // SAFETY: same layout, as the caller promised it for us.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if layout.size() > LIMIT {
                oversize(layout.size(), LIMIT);
                return std::ptr::null_mut();
            }
            // SAFETY: as above.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            if new_size > LIMIT {
                oversize(new_size, LIMIT);
                return std::ptr::null_mut();
            }
            // SAFETY: as above.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

/// nbdkit serving test disks (scripts/setup installs it): the emulated remote members of
/// the NBD-member tests.
pub mod nbdkit {
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// A hang guard for nbdkit starting, never a speed limit.
    const START_GUARD: Duration = Duration::from_secs(60);

    /// True when nbdkit runs here. Missing under CI is a failure (scripts/setup installs
    /// it); elsewhere the test is recorded as skipped.
    pub fn available(test: &str) -> bool {
        if Command::new("nbdkit").arg("--version").output().is_ok_and(|o| o.status.success()) {
            return true;
        }
        assert!(!crate::in_ci(), "{test}: nbdkit is missing; scripts/setup installs it");
        crate::skip(test, "`nbdkit` not found (scripts/setup installs it)");
        false
    }

    /// nbdkit serving one export on a Unix socket, in the foreground, killed on drop.
    pub struct Nbdkit {
        child: Child,
        sock: PathBuf,
        args: Vec<String>,
    }

    impl Nbdkit {
        /// Starts `nbdkit ARGS` (plugin, its parameters, filters) on `sock` and waits until
        /// it accepts connections.
        pub fn start(sock: &Path, args: &[&str]) -> Nbdkit {
            let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            let child = Self::spawn(sock, &args);
            let mut k = Nbdkit { child, sock: sock.to_path_buf(), args };
            k.wait_ready();
            k
        }
        fn spawn(sock: &Path, args: &[String]) -> Child {
            let _ = std::fs::remove_file(sock);
            Command::new("nbdkit")
                .args(["-f", "--exit-with-parent", "-U"])
                .arg(sock)
                .args(args)
                .stdout(Stdio::null())
                // Quiet: every readiness probe below makes it log a broken handshake.
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nbdkit")
        }
        fn wait_ready(&mut self) {
            let start = Instant::now();
            while std::os::unix::net::UnixStream::connect(&self.sock).is_err() {
                if let Some(status) = self.child.try_wait().expect("nbdkit status") {
                    panic!("nbdkit {:?} exited: {status}", self.args);
                }
                assert!(start.elapsed() < START_GUARD, "nbdkit did not start listening: hung");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        /// The export's NBD URI.
        pub fn uri(&self) -> String {
            format!("nbd+unix:///?socket={}", self.sock.display())
        }
        /// Stops the server (its clients see the connection drop).
        pub fn kill(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        /// Stops it and starts it again with the same arguments on the same socket.
        pub fn restart(&mut self) {
            self.kill();
            self.child = Self::spawn(&self.sock, &self.args);
            self.wait_ready();
        }
    }

    impl Drop for Nbdkit {
        fn drop(&mut self) {
            self.kill();
        }
    }
}
