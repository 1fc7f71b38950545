//! fio job files equivalent to each workload, written into the report folder so the same
//! experiment can be run on a device uraid exports (or on Linux md) with the usual tool.

use crate::report::size_label;
use crate::suite::ConfigRecord;
use std::fmt::Write as _;
use std::path::Path;

fn header(workload: &str, what: &str, c: &ConfigRecord) -> String {
    format!(
        "; uraid bench {workload}: {what}\n\
         ; fio cannot drive uraid's in-process engine, so this job targets a file or device given\n\
         ; as $TARGET, e.g.:\n\
         ;   TARGET=/mnt/uraid/array fio {workload}.fio     (the file of uraid's FUSE export)\n\
         ;   TARGET=/dev/nbd0 fio {workload}.fio            (uraid's NBD export via nbd-client)\n\
         ;   TARGET=/dev/md0 fio {workload}.fio             (the same array under Linux md)\n\
         ; or, with fio built with libnbd, replace filename= by: ioengine=nbd and uri=nbd://localhost/\n\
         ; uraid bench used {} members, chunk {} (chunk is the array's property: set it at create).\n\
         ; WARNING: the write sections overwrite $TARGET.\n\
         [global]\n\
         filename=${{TARGET}}\n\
         size={}\n\
         ; uraid bench does buffered I/O (O_DIRECT is not implemented); on a block device set\n\
         ; direct=1 so fio's figures are not page-cache figures.\n\
         direct=0\n\
         group_reporting\n\
         ; each section below starts with stonewall: it waits for the ones before it.\n",
        c.members,
        size_label(c.chunk_bytes),
        size_label(c.region_bytes)
    )
}

fn seq_sections(c: &ConfigRecord, out: &mut String, prefix: &str, blocks: &[u64]) {
    for &b in blocks {
        for rw in ["write", "read"] {
            let _ = write!(
                out,
                "\n[{prefix}{rw}-{bs}]\nstonewall\nrw={rw}\nbs={bs}\nioengine=psync\nruntime={ms}ms\n",
                bs = size_label(b),
                ms = c.time_per_point_ms
            );
            if rw == "write" {
                out.push_str("end_fsync=1\n");
            }
        }
    }
}

fn rand_sections(c: &ConfigRecord, out: &mut String, prefix: &str) {
    for rw in ["randread", "randwrite"] {
        // uraid bench keeps jobs × iodepth synchronous requests in flight (threads);
        // libaio with iodepth gives a device the same depth.
        let _ = write!(
            out,
            "\n[{prefix}{rw}]\nstonewall\nrw={rw}\nbs={}\nioengine=libaio\nnumjobs={}\niodepth={}\ntime_based\nruntime={}ms\n",
            size_label(c.rand_block),
            c.jobs,
            c.iodepth,
            c.time_per_point_ms
        );
    }
}

pub fn write_jobs(dir: &Path, c: &ConfigRecord) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<(&str, String)> = Vec::new();

    let mut s = header("seq", "sequential write then read, per request size", c);
    seq_sections(c, &mut s, "", &c.seq_blocks);
    files.push(("seq", s));

    let mut s = header("rand", "random read and write, jobs × iodepth in flight, latency percentiles", c);
    s.push_str("percentile_list=50:99:99.9\n");
    rand_sections(c, &mut s, "");
    files.push(("rand", s));

    let mut s = header("mixed", "1..=N random readers over 80 % of the region while one writer appends to ten files in the last 20 %", c);
    for &size in &c.mixed_read_sizes {
        for n in 1..=c.mixed_max_readers {
            let _ = write!(
                s,
                "\n[readers{n}-{bs}]\nstonewall\nrw=randread\nbs={bs}\nsize=80%\nnumjobs={n}\nioengine=psync\ntime_based\nruntime={ms}ms\n\
                 \n[appender-with-{n}-{bs}]\n; no stonewall: runs alongside the readers above\nrw=write\nbs={ab}\noffset=80%\nsize=20%\nnrfiles=1\nrate_iops={iops}\nioengine=psync\ntime_based\nruntime={ms}ms\n",
                bs = size_label(size),
                ms = c.time_per_point_ms,
                ab = size_label(c.mixed_append_bytes),
                iops = (1000 / c.mixed_append_interval_ms.max(1)).max(1)
            );
        }
    }
    files.push(("mixed", s));

    let mut s = header(
        "throughput",
        "iozone -t style: every job writes, rewrites, reads, re-reads, random-reads and random-writes its own region",
        c,
    );
    for (name, rw) in [
        ("initial-write", "write"),
        ("rewrite", "write"),
        ("read", "read"),
        ("reread", "read"),
        ("randread", "randread"),
        ("randwrite", "randwrite"),
    ] {
        let _ = write!(
            s,
            "\n[{name}]\nstonewall\nrw={rw}\nbs={}\nnumjobs={}\nsize={}\noffset_increment={}\nioengine=psync\n",
            size_label(c.tp_record),
            c.jobs,
            size_label(c.tp_bytes_per_job),
            size_label(c.tp_bytes_per_job)
        );
    }
    files.push(("throughput", s));

    let mut s = header("degraded", "seq and rand with one member failed (RAID6: two). First: uraid fail NAME MEMBER (or mdadm --fail)", c);
    seq_sections(c, &mut s, "degraded-", &[c.seq_blocks.iter().copied().max().unwrap_or(1 << 20)]);
    rand_sections(c, &mut s, "degraded-");
    files.push(("degraded", s));

    let mut s = header(
        "rebuild",
        "random reads while a spare is rebuilt. Start: uraid add NAME spare.img; stop fio when uraid status shows the rebuild done",
        c,
    );
    let _ = write!(
        s,
        "\n[rebuild-randread]\nstonewall\nrw=randread\nbs={}\nioengine=libaio\nnumjobs={}\niodepth={}\ntime_based\nruntime=600s\n; latency over time, 100 ms averages, like the report's rebuild-latency plot\nwrite_lat_log=rebuild\nlog_avg_msec=100\npercentile_list=50:99:99.9\n",
        size_label(c.rand_block),
        c.jobs,
        c.iodepth
    );
    files.push(("rebuild", s));

    for (name, body) in files {
        std::fs::write(dir.join(format!("{name}.fio")), body).map_err(|e| format!("{name}.fio: {e}"))?;
    }
    Ok(())
}
