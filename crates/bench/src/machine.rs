//! What a run was measured on, recorded in every report so two reports can be compared
//! knowingly: CPU, memory, kernel, where the member files lived, and the parity kernels.

use serde::{Deserialize, Serialize};
use std::path::Path;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpu_model: String,
    /// The flags that change uraid's speed (SIMD width, GFNI), of those the CPU has.
    pub cpu_flags: Vec<String>,
    /// CPUs this process may run on.
    pub cores: usize,
    pub mem_total_mib: u64,
    pub kernel: String,
}

const FLAGS_OF_INTEREST: &[&str] =
    &["sse2", "ssse3", "sse4_2", "avx", "avx2", "avx512f", "avx512bw", "avx512vl", "gfni", "vpclmulqdq", "aes", "bmi2", "hypervisor"];

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo
                .lines()
                .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        };
        let flags = field("flags").unwrap_or_default();
        let have: Vec<&str> = flags.split_whitespace().collect();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        Machine {
            cpu_model: field("model name").unwrap_or_else(|| std::env::consts::ARCH.to_string()),
            cpu_flags: FLAGS_OF_INTEREST.iter().filter(|f| have.contains(f)).map(|f| f.to_string()).collect(),
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            mem_total_mib: mem_kib / 1024,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default(),
        }
    }
}

/// Where the members (and the peer) lived, and what that means for the figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Backing {
    pub dir: String,
    pub fs_type: String,
    /// What the page cache does to these figures, in words.
    pub note: String,
    /// What the peer rows ran on.
    pub peer: String,
}

/// The filesystem type of the mount holding `dir` (longest matching mount point).
pub fn fs_type(dir: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let d = dir.display().to_string();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && (d == f[1] || d.starts_with(&format!("{}/", f[1].trim_end_matches('/')))))
                .then(|| (f[1].len(), f[2].to_string()))
        })
        .max()
        .map_or("unknown".into(), |b| b.1)
}

impl Backing {
    pub fn describe(dir: &Path, data_bytes: u64, mem_total_mib: u64, peer: String) -> Backing {
        let fs = fs_type(dir);
        let note = if fs == "tmpfs" {
            "members are files on tmpfs: they live in RAM and there is no page cache beneath them, so \
             every figure is the engine's CPU and memory cost (what a very fast disk would show), never a disk's"
                .to_string()
        } else {
            format!(
                "members are files on {fs}, read and written through the page cache (O_DIRECT is not implemented); \
                 the data set is {} MiB against {} MiB of RAM; {}",
                data_bytes >> 20,
                mem_total_mib,
                if data_bytes >> 20 > mem_total_mib {
                    "reads mostly reach the device"
                } else if std::fs::metadata("/proc/sys/vm/drop_caches").map(|m| !m.permissions().readonly()).unwrap_or(false) {
                    "the page cache is dropped (echo 1 > /proc/sys/vm/drop_caches) before every sequential read pass; random reads may still hit cache"
                } else {
                    "reads may be served from the page cache (not root: cannot drop it): treat read figures as cache speed"
                }
            )
        };
        Backing { dir: dir.display().to_string(), fs_type: fs, note, peer }
    }
}

/// Off tmpfs: `sync`, then drop clean page-cache pages (needs root), so reads that follow
/// reach the members. Returns whether the cache was dropped.
pub fn drop_page_cache_unless_tmpfs(dir: &Path) -> bool {
    if fs_type(dir) == "tmpfs" {
        return false;
    }
    // std has no sync(2); the `sync` command flushes every filesystem.
    let synced = std::process::Command::new("sync").status().map(|s| s.success()).unwrap_or(false);
    synced && std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

/// The parity kernel chosen for one operation and block-size class.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct KernelChoice {
    pub op: String,
    pub size: String,
    pub kernel: String,
    pub forced: bool,
}

pub fn parity_kernels() -> Vec<KernelChoice> {
    uraid_parity::selection()
        .choices
        .iter()
        .map(|c| KernelChoice {
            op: c.op.name().to_string(),
            size: c.size.name().to_string(),
            kernel: c.kernel.name.to_string(),
            forced: c.forced,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_reads_proc() {
        let m = Machine::probe();
        assert!(m.cores >= 1);
        if Path::new("/proc/meminfo").exists() {
            assert!(m.mem_total_mib > 0);
            assert!(!m.kernel.is_empty());
        }
    }

    #[test]
    fn backing_note_names_the_filesystem() {
        let b = Backing::describe(Path::new("/"), 1 << 30, 1 << 20, "file".into());
        assert!(b.note.contains(&b.fs_type), "{b:?}");
    }
}
