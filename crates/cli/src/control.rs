//! The local control socket of a serving process: one JSON request per line, one JSON reply
//! per line. `uraid status/detail/fail/remove/add/replace/check/repair/stop` are clients.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    Status,
    Fail {
        device: String,
    },
    Remove {
        device: String,
    },
    /// `force`: overwrite what the device holds; `re_add`: take back a former member.
    Add {
        device: String,
        #[serde(default)]
        force: bool,
        #[serde(default)]
        re_add: bool,
    },
    Replace {
        device: String,
        with: String,
        #[serde(default)]
        force: bool,
    },
    Check {
        repair: bool,
    },
    /// List a range as bad on a member (md's sysfs `bad_blocks` store).
    BadBlocks {
        device: String,
        start: u64,
        sectors: u64,
    },
    /// Change the shape (mdadm --grow): level (as given), member count, chunk (sectors),
    /// layout (by name).
    Grow {
        #[serde(default)]
        level: Option<String>,
        #[serde(default)]
        raid_devices: Option<u32>,
        #[serde(default)]
        chunk_sectors: Option<u32>,
        #[serde(default)]
        layout: Option<String>,
        /// The members' used size (`max` or a size with a suffix), alone.
        #[serde(default)]
        size: Option<String>,
        /// mdadm --array-size, sectors: the size a shrink may cut the array to.
        #[serde(default)]
        array_size_sectors: Option<u64>,
        /// New devices (absolute paths) of a RAID0 that gets more members (mdadm --grow
        /// -n N --add).
        #[serde(default)]
        add: Vec<String>,
    },
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ArrayStatus>,
    /// What the request did, in words, when there is more to say than the status (a re-add:
    /// from the bitmap or in full, and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Reply {
    pub fn ok(status: Option<ArrayStatus>) -> Reply {
        Reply { ok: true, error: None, status, message: None }
    }
    pub fn err(e: impl ToString) -> Reply {
        Reply { ok: false, error: Some(e.to_string()), status: None, message: None }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceStatus {
    pub device: String,
    pub dev_number: u32,
    /// in_sync, recovering, spare, faulty
    pub state: String,
    pub role: Option<usize>,
    pub recovered_sectors: Option<u64>,
    /// Why the serving process failed this device (the I/O error, or a request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Read errors on this member since the array was started (md's `read_errors`).
    #[serde(default)]
    pub read_errors: u64,
    /// Of those, ranges rebuilt from redundancy, rewritten and read back (md's `errors`).
    #[serde(default)]
    pub read_errors_corrected: u64,
    /// The member's bad-block log: (first sector, sectors), absolute device sectors as md's
    /// sysfs `bad_blocks` lists them. Empty when nothing is listed or there is no log.
    #[serde(default)]
    pub bad_blocks: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobStatus {
    pub kind: String,
    pub done_sectors: u64,
    pub total_sectors: u64,
    pub speed_kib_per_s: f64,
    pub eta_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckResult {
    pub kind: String,
    pub mismatch_cnt: u64,
    pub wrong_member_rows: Vec<(usize, u64)>,
    pub unattributed_rows: u64,
    pub repaired_rows: u64,
    pub finished: bool,
    /// Where the scrub found something and what it did (at most 1000; the rest counted in
    /// `findings_dropped`).
    #[serde(default)]
    pub findings: Vec<Finding>,
    #[serde(default)]
    pub findings_dropped: u64,
}

/// One scrub finding: array sector, the member at fault when known, and the action taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    pub array_sector: u64,
    pub sectors: u64,
    pub role: Option<usize>,
    /// The member holding that role then, if known.
    pub device: Option<String>,
    pub action: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArrayStatus {
    pub name: String,
    pub uuid: String,
    pub level: String,
    pub layout: u32,
    pub chunk_kib: u64,
    pub raid_disks: usize,
    pub size_bytes: u64,
    pub events: u64,
    /// clean / active / degraded / failed
    pub state: String,
    pub missing_roles: Vec<usize>,
    pub devices: Vec<DeviceStatus>,
    pub job: Option<JobStatus>,
    pub last_check: Option<CheckResult>,
    pub exports: Vec<String>,
    pub pid: u32,
}

/// Where serving processes put their sockets: $URAID_RUN_DIR, else /run/uraid for root,
/// else $XDG_RUNTIME_DIR/uraid, else /tmp/uraid-$UID.
pub fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("URAID_RUN_DIR") {
        return PathBuf::from(d);
    }
    let uid = current_uid();
    if uid == 0 {
        return PathBuf::from("/run/uraid");
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(x).join("uraid");
    }
    PathBuf::from(format!("/tmp/uraid-{uid}"))
}

/// The uid owning this process (from /proc, so no unsafe call is needed).
fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0)
}

/// A socket file name for an array name ("host:data" -> "host_data.sock").
pub fn socket_path(name: &str) -> PathBuf {
    let safe: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    run_dir().join(format!("{safe}.sock"))
}

/// Sends one request to one socket.
pub fn call(socket: &std::path::Path, req: &Request) -> Result<Reply> {
    let mut s = UnixStream::connect(socket).with_context(|| format!("connecting to {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(600)))?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    if reply.is_empty() {
        bail!("{} closed the connection without a reply", socket.display());
    }
    Ok(serde_json::from_str(&reply)?)
}

/// Every live serving process: (socket, status). Stale sockets (no listener) are skipped.
pub fn discover() -> Vec<(PathBuf, ArrayStatus)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(run_dir()) else { return out };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "sock")).collect();
    paths.sort();
    for p in paths {
        if let Ok(Reply { status: Some(st), .. }) = call(&p, &Request::Status) {
            out.push((p, st));
        }
    }
    out
}

/// The socket of the served array called `name` (array name, socket name or uuid).
pub fn find(name: &str) -> Result<(PathBuf, ArrayStatus)> {
    let all = discover();
    if all.is_empty() {
        bail!("no arrays are being served (start one with `uraid serve DEV...`)");
    }
    let names: Vec<String> = all.iter().map(|(_, s)| s.name.clone()).collect();
    all.into_iter()
        .find(|(p, s)| s.name == name || s.uuid == name || p.file_stem().is_some_and(|f| f == name))
        .with_context(|| format!("no served array named {name:?} (served: {})", names.join(", ")))
}
