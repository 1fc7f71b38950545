//! SimDisk's fault model: crashes keep flushed data and lose, keep or tear unflushed writes;
//! fail-stop, latent sector errors and power-off behave as documented.

use uraid_engine::Member;
use uraid_sim::SimDisk;

const S: usize = 512;

#[test]
fn crash_keeps_flushed_data() {
    let d = SimDisk::new("d", 64 * 1024, 1);
    d.write_at(&[7u8; 4096], 8192).unwrap();
    d.flush().unwrap();
    d.crash();
    d.power_on();
    let mut b = [0u8; 4096];
    d.read_at(&mut b, 8192).unwrap();
    assert_eq!(b, [7u8; 4096]);
    assert_eq!(d.durable_snapshot(), d.volatile_snapshot());
}

#[test]
fn unflushed_writes_are_visible_before_the_crash_but_not_durable() {
    let d = SimDisk::new("d", 16 * 1024, 2);
    d.write_at(&[9u8; 1024], 0).unwrap();
    let mut b = [0u8; 1024];
    d.read_at(&mut b, 0).unwrap();
    assert_eq!(b, [9u8; 1024], "reads see the cache");
    assert_eq!(&d.durable_snapshot()[..1024], &[0u8; 1024][..], "nothing durable before a flush");
    assert_eq!(d.unflushed_writes(), 1);
}

/// Over many seeds, a crash produces each outcome (lost, whole, torn), and every sector of
/// an unflushed write ends up either all old or all new (sector atomicity).
#[test]
fn crash_drops_keeps_or_tears_unflushed_writes_at_sector_granularity() {
    let (mut lost, mut whole, mut torn) = (0, 0, 0);
    for seed in 0..200 {
        let d = SimDisk::new("d", 64 * 1024, seed);
        d.write_at(&[1u8; 16 * S], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2u8; 16 * S], 0).unwrap();
        let o = d.crash();
        lost += o.lost;
        whole += o.whole;
        torn += o.torn;
        let img = d.durable_snapshot();
        for s in 0..16 {
            let sector = &img[s * S..(s + 1) * S];
            assert!(sector == [1u8; S] || sector == [2u8; S], "seed {seed} sector {s} mixed within a sector");
        }
        assert_eq!(img, d.volatile_snapshot());
        assert_eq!(d.unflushed_writes(), 0);
        d.power_on();
    }
    assert!(lost > 0 && whole > 0 && torn > 0, "lost {lost} whole {whole} torn {torn}");
}

#[test]
fn unaligned_unflushed_write_tears_on_sector_boundaries() {
    // A write from byte 100 to 1300 covers pieces [100,512), [512,1024), [1024,1300).
    for seed in 0..100 {
        let d = SimDisk::new("d", 4096, seed);
        d.write_at(&[3u8; 1200], 100).unwrap();
        d.crash();
        let img = d.durable_snapshot();
        for (lo, hi) in [(100, 512), (512, 1024), (1024, 1300)] {
            let piece = &img[lo..hi];
            assert!(piece.iter().all(|b| *b == 0) || piece.iter().all(|b| *b == 3), "seed {seed} piece {lo}..{hi}");
        }
        assert!(img[..100].iter().all(|b| *b == 0) && img[1300..].iter().all(|b| *b == 0));
    }
}

#[test]
fn crash_is_deterministic_per_seed() {
    let run = |seed| {
        let d = SimDisk::new("d", 64 * 1024, seed);
        for i in 0..10u8 {
            d.write_at(&[i; 3 * S], u64::from(i) * 2 * S as u64).unwrap();
        }
        d.crash();
        d.durable_snapshot()
    };
    assert_eq!(run(42), run(42));
}

#[test]
fn fail_stop_fails_that_operation_and_every_later_one() {
    let d = SimDisk::new("d", 16 * 1024, 3);
    d.fail_stop_after(2);
    d.write_at(&[1u8; S], 0).unwrap();
    assert!(d.write_at(&[2u8; 4 * S], 0).is_err(), "second operation is the fatal one");
    assert!(d.is_dead());
    let mut b = [0u8; S];
    assert!(d.read_at(&mut b, 0).is_err());
    assert!(d.flush().is_err());
    assert_eq!(d.counters().errors, 3);
}

#[test]
fn latent_sector_errors_fail_reads_until_rewritten() {
    let d = SimDisk::new("d", 16 * 1024, 4);
    d.add_bad_sectors(4, 2);
    let mut b = [0u8; 2 * S];
    assert!(d.read_at(&mut b, 3 * S as u64).is_err());
    d.read_at(&mut b, 0).unwrap();
    // A partial write does not remap the sector; a whole-sector write does.
    d.write_at(&[1u8; 10], 4 * S as u64).unwrap();
    assert!(d.read_at(&mut b, 4 * S as u64).is_err());
    d.write_at(&[1u8; 2 * S], 4 * S as u64).unwrap();
    d.read_at(&mut b, 4 * S as u64).unwrap();
    assert_eq!(d.bad_sector_count(), 0);
}

#[test]
fn powered_off_disk_refuses_io_without_counting() {
    let d = SimDisk::new("d", 4096, 5);
    d.crash();
    assert!(d.write_at(&[1u8; S], 0).is_err());
    assert_eq!(d.counters().ops, 0);
    d.power_on();
    d.write_at(&[1u8; S], 0).unwrap();
}

#[test]
fn out_of_range_is_an_error_not_a_panic() {
    let d = SimDisk::new("d", 4096, 6);
    let mut b = [0u8; 16];
    assert!(d.read_at(&mut b, 4090).is_err());
    assert!(d.write_at(&b, 4096).is_err());
    assert!(d.write_at(&b, u64::MAX).is_err());
}
