//! `bench uring`'s executors move the right bytes: what one executor writes (pwrite on the pool
//! or in line, or the engine's executor from one caller or several) every other reads back, on
//! tmpfs and with O_DIRECT on a disk filesystem; and the bench runs end to end on tiny sizes.
//! Skipped, with the reason printed, where io_uring is unavailable (ENOSYS/EPERM sandboxes).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use uraid_bench::machine::fs_type;
use uraid_bench::uring::{
    io_pool, run, uring_available, AlignedBuf, Executor, Hooks, Job, NoHooks, Op, Pattern, Storage, Stream, UringBenchConfig,
};
use uraid_engine::{FileMember, IoMode};

const MEMBERS: usize = 4;
const FILE_BYTES: u64 = 1 << 20;

/// Every 8-byte word of member `m` at file position `p` holds `p ^ m << 56 ^ gen << 48`.
struct Check {
    gen: u64,
    write: bool,
}

fn word(gen: u64, member: usize, pos: u64) -> [u8; 8] {
    (pos ^ (member as u64) << 56 ^ gen << 48).to_le_bytes()
}

impl Hooks for Check {
    fn before(&self, bufs: &mut [AlignedBuf], offset: u64) {
        for (m, buf) in bufs.iter_mut().enumerate() {
            for (i, w) in buf.chunks_exact_mut(8).enumerate() {
                // A read must overwrite all of this.
                w.copy_from_slice(&if self.write { word(self.gen, m, offset + 8 * i as u64) } else { [0xEE; 8] });
            }
        }
    }

    fn after(&self, bufs: &[AlignedBuf], offset: u64) -> Result<(), String> {
        if self.write {
            return Ok(());
        }
        for (m, buf) in bufs.iter().enumerate() {
            for (i, w) in buf.chunks_exact(8).enumerate() {
                let pos = offset + 8 * i as u64;
                if w != word(self.gen, m, pos) {
                    return Err(format!("member {m} at {pos}: read {w:02x?}, expected {:02x?}", word(self.gen, m, pos)));
                }
            }
        }
        Ok(())
    }
}

/// The member files, opened for the bench's own executors and as the engine opens them.
fn members(dir: &Path, direct: bool) -> (Vec<File>, Vec<Arc<FileMember>>) {
    (0..MEMBERS)
        .map(|m| {
            let path = dir.join(format!("m{m}"));
            let f = File::create(&path).expect("create member");
            f.set_len(FILE_BYTES).expect("size member");
            drop(f);
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(true);
            if direct {
                use std::os::unix::fs::OpenOptionsExt;
                o.custom_flags(libc::O_DIRECT);
            }
            let mode = if direct { IoMode::Direct } else { IoMode::Buffered };
            (o.open(&path).expect("open member"), Arc::new(FileMember::open_with(&path, true, mode).expect("engine member")))
        })
        .unzip()
}

/// Folders to test in: tmpfs (buffered) if there is one, and the temp dir with O_DIRECT if it
/// is a disk filesystem.
fn places() -> Vec<(tempfile::TempDir, bool)> {
    let mut out = Vec::new();
    if fs_type(Path::new("/dev/shm")) == "tmpfs" {
        out.push((tempfile::tempdir_in("/dev/shm").expect("tempdir"), false));
    }
    let tmp: PathBuf = std::env::temp_dir();
    if fs_type(&tmp) != "tmpfs" {
        out.push((tempfile::tempdir_in(&tmp).expect("tempdir"), true));
    } else {
        println!("no O_DIRECT case: {} is tmpfs", tmp.display());
    }
    out
}

/// The member-I/O pool, or None (with the reason printed) where io_uring is unavailable.
fn pool_if_uring() -> Option<rayon::ThreadPool> {
    if let Err(why) = uring_available() {
        uraid_testkit::skip("bench uring", &why);
        return None;
    }
    Some(io_pool().expect("pool"))
}

#[test]
fn every_executor_reads_what_every_other_wrote() {
    let Some(pool) = pool_if_uring() else { return };
    let mut gen = 0;
    for (dir, direct) in places() {
        let (files, engine) = members(dir.path(), direct);
        for chunk in [4096, 64 << 10] {
            let slots = FILE_BYTES / chunk as u64;
            for writer in Executor::ALL {
                gen += 1;
                // Writes cover every chunk once, in order; reads visit them in both orders.
                let stream = Stream::new(Pattern::Seq, chunk, FILE_BYTES, Some(slots));
                let hooks = Check { gen, write: true };
                let job =
                    Job { files: &files, members: &engine, op: Op::Write, chunk, depth: 3, stream: &stream, hooks: &hooks, time: None };
                let t = job.run(writer, &pool).unwrap_or_else(|e| panic!("{} write (direct {direct}, chunk {chunk}): {e}", writer.name()));
                assert_eq!(t.requests, slots, "{} wrote every chunk", writer.name());
                for reader in Executor::ALL {
                    for pattern in [Pattern::Seq, Pattern::Rand] {
                        let stream = Stream::new(pattern, chunk, FILE_BYTES, Some(slots));
                        let hooks = Check { gen, write: false };
                        let job = Job {
                            files: &files,
                            members: &engine,
                            op: Op::Read,
                            chunk,
                            depth: 3,
                            stream: &stream,
                            hooks: &hooks,
                            time: None,
                        };
                        let t = job.run(reader, &pool).unwrap_or_else(|e| {
                            panic!("{} wrote, {} read {pattern:?} (direct {direct}, chunk {chunk}): {e}", writer.name(), reader.name())
                        });
                        assert_eq!(t.requests, slots);
                    }
                }
            }
        }
    }
}

#[test]
fn reading_past_the_end_is_an_error_not_a_hang() {
    let Some(pool) = pool_if_uring() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let (files, engine) = members(dir.path(), false);
    // The stream believes the files are twice as long as they are.
    for exec in Executor::ALL {
        let stream = Stream::new(Pattern::Seq, 64 << 10, 2 * FILE_BYTES, Some(2 * FILE_BYTES / (64 << 10)));
        let job =
            Job { files: &files, members: &engine, op: Op::Read, chunk: 64 << 10, depth: 4, stream: &stream, hooks: &NoHooks, time: None };
        let r = job.run(exec, &pool);
        assert!(r.is_err(), "{}: read past the end succeeded", exec.name());
    }
}

#[test]
fn bench_runs_on_tiny_sizes() {
    let shm = Path::new("/dev/shm");
    let cfg = UringBenchConfig {
        storages: vec![Storage::Tmpfs, Storage::Direct],
        shm_dir: if fs_type(shm) == "tmpfs" { shm.into() } else { std::env::temp_dir() },
        members: vec![2],
        chunks: vec![4096, 64 << 10],
        file_bytes: 1 << 20,
        time: Duration::from_millis(4),
        ..Default::default()
    };
    let report = run(&cfg, &mut |_| {}).expect("bench uring");
    let measured: Vec<Storage> = report.storages.iter().filter(|s| s.skipped.is_none()).map(|s| s.storage).collect();
    assert!(!measured.is_empty(), "nothing measured: {:?}", report.storages);
    // The engine's ring executors run where the engine uses a ring: O_DIRECT members.
    let executors = |s: &Storage| if report.uring_unavailable.is_some() || *s == Storage::Tmpfs { 3 } else { 5 };
    if let Some(why) = &report.uring_unavailable {
        println!("{why}: io_uring rows skipped");
    }
    // Per storage: 2 chunks × 2 patterns × 2 ops points, one record per executor.
    assert_eq!(report.records.len(), measured.iter().map(|s| 8 * executors(s)).sum::<usize>());
    assert!(report.records.iter().all(|r| r.requests > 0 && r.mb_per_s > 0.0), "{:?}", report.records);
    assert!(report.records.iter().all(|r| r.vs_pool.is_some()));
    let text = uraid_bench::uring::render(&report, false);
    assert!(text.contains("Summary"), "{text}");
}
