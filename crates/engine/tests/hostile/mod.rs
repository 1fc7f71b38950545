//! Structured mutation of valid superblocks, and the oracle that judges what uraid does with
//! them. Shared by `tests/hostile_superblocks.rs` (proptest, stable) and the cargo-fuzz
//! target `fuzz/fuzz_targets/superblock_mutation.rs` (which includes this file by path).
//!
//! A case: an array made by the real create planner on in-memory members that record every
//! write, one field of one superblock (or of every member's, or of a write-intent bitmap's
//! superblock) set to an extreme or random value, the checksum fixed so the superblock still
//! decodes. Then probe, assembly and, if the array is accepted, writes and reads. The oracle:
//! - nothing panics and every refusal is one line;
//! - an accepted member's metadata (superblock, write-intent bitmap) lies outside its data
//!   area, all inside the device (else assembly should have refused it);
//! - every write lands inside the member's data area, its superblock or its bitmap, as the
//!   superblock on the member says;
//! - data written reads back.
//!
//! Allocation size is bounded by the test binary's allocator, not here. With
//! `URAID_HOSTILE_TRACE=1` each case and its outcome go to stderr as they run (not captured
//! by the test harness), which names the case when one hangs or aborts the process.
#![allow(dead_code)]

use std::io;
use std::sync::{Arc, Mutex, RwLock};
use uraid_core::geometry::Level;
use uraid_core::metadata::create::{plan_create, BitmapRequest, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::sb1::MdTime;
use uraid_core::metadata::{
    sb090_offset_sectors, superblock_locations, BitmapSuperblock, MetadataVersion, Superblock, Superblock090, Superblock1,
};
use uraid_engine::{Array, ArrayOptions, Member};

/// An in-memory member that logs every write (offset, length).
pub struct Recording {
    label: String,
    bytes: RwLock<Vec<u8>>,
    writes: Mutex<Vec<(u64, u64)>>,
}

impl Recording {
    pub fn new(label: String, size: usize) -> Recording {
        Recording { label, bytes: RwLock::new(vec![0; size]), writes: Mutex::new(Vec::new()) }
    }
    pub fn take_writes(&self) -> Vec<(u64, u64)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.read().unwrap().clone()
    }
    fn poke(&self, offset: u64, data: &[u8]) {
        let mut b = self.bytes.write().unwrap();
        b[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
    fn range(&self, offset: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
        let size = self.bytes.read().unwrap().len() as u64;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(offset as usize..end as usize),
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{}: {len} bytes at {offset} are past the end", self.label))),
        }
    }
}

impl Member for Recording {
    fn label(&self) -> &str {
        &self.label
    }
    fn size_bytes(&self) -> u64 {
        self.bytes.read().unwrap().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let r = self.range(offset, buf.len())?;
        buf.copy_from_slice(&self.bytes.read().unwrap()[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // Logged before the range check: an attempt outside the device is a finding too.
        self.writes.lock().unwrap().push((offset, buf.len() as u64));
        let r = self.range(offset, buf.len())?;
        self.bytes.write().unwrap()[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The array made before mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub level: Level,
    pub metadata: MetadataVersion,
    pub disks: usize,
    pub bitmap: bool,
    pub spare: bool,
}

/// Every shape the cases draw from: each level, each metadata version, with and without an
/// internal bitmap and a spare where the level has redundancy.
pub fn shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    for metadata in [MetadataVersion::V0_90, MetadataVersion::V1_0, MetadataVersion::V1_1, MetadataVersion::V1_2] {
        for (level, disks) in [
            (Level::Linear, 2),
            (Level::Raid0, 3),
            (Level::Raid1, 2),
            (Level::Raid4, 3),
            (Level::Raid5, 3),
            (Level::Raid6, 4),
            (Level::Raid10, 4),
        ] {
            let redundant = level.has_redundancy();
            for bitmap in [false, true] {
                if bitmap && !redundant {
                    continue;
                }
                v.push(Shape { level, metadata, disks, bitmap, spare: redundant && !bitmap });
            }
        }
    }
    v
}

/// Which bytes a mutation changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A field of the md superblock: (name, byte offset, width in bytes).
    Superblock(&'static str, usize, usize),
    /// A field of the write-intent bitmap's superblock.
    Bitmap(&'static str, usize, usize),
}

/// Fields of a 1.x superblock (`struct mdp_superblock_1`).
pub const SB1_FIELDS: &[(&str, usize, usize)] = &[
    ("feature_map", 8, 4),
    ("level", 72, 4),
    ("layout", 76, 4),
    ("size", 80, 8),
    ("chunksize", 88, 4),
    ("raid_disks", 92, 4),
    ("bitmap_offset", 96, 4),
    ("reshape_position", 104, 8),
    ("data_offset", 128, 8),
    ("data_size", 136, 8),
    ("super_offset", 144, 8),
    ("recovery_offset", 152, 8),
    ("dev_number", 160, 4),
    ("bblog_size", 186, 2),
    ("bblog_offset", 188, 4),
    ("events", 200, 8),
    ("resync_offset", 208, 8),
    ("max_dev", 220, 4),
    ("dev_roles[0]", 256, 2),
    ("dev_roles[1]", 258, 2),
];

/// Fields of a 0.90 superblock (`mdp_super_t`).
pub const SB090_FIELDS: &[(&str, usize, usize)] = &[
    ("minor_version", 8, 4),
    ("level", 28, 4),
    ("size", 32, 4),
    ("nr_disks", 36, 4),
    ("raid_disks", 40, 4),
    ("state", 132, 4),
    ("events_lo", 156, 4),
    ("events_hi", 160, 4),
    ("recovery_cp", 172, 4),
    ("layout", 256, 4),
    ("chunk_size", 260, 4),
    ("disks[0].raid_disk", 512 + 12, 4),
    ("disks[0].state", 512 + 16, 4),
    ("this_disk.number", 3968, 4),
    ("this_disk.raid_disk", 3968 + 12, 4),
    ("this_disk.state", 3968 + 16, 4),
];

/// Fields of the write-intent bitmap superblock (`bitmap_super_t`).
pub const BITMAP_FIELDS: &[(&str, usize, usize)] =
    &[("version", 4, 4), ("events", 24, 8), ("sync_size", 40, 8), ("chunksize", 52, 4), ("sectors_reserved", 64, 4)];

/// One case: a shape, the field, the value and which members get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub shape: Shape,
    pub target: Target,
    /// How to pick the value, given the field's width, its current value and the device.
    pub value: Value,
    /// `None`: every device gets the same change; `Some(i)`: only device `i`.
    pub device: Option<usize>,
    pub force: bool,
}

/// A new field value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    Zero,
    One,
    Max,
    /// The top bit alone (2^63 for a u64: wraps to byte 0 when multiplied by 512).
    TopBit,
    /// The current value plus a small signed delta.
    Near(i8),
    /// The device size in sectors plus a small signed delta.
    DeviceSectors(i8),
    Random(u64),
}

impl Value {
    fn resolve(self, width: usize, current: u64, dev_bytes: u64) -> u64 {
        let mask = if width == 8 { u64::MAX } else { (1u64 << (8 * width)) - 1 };
        let v = match self {
            Value::Zero => 0,
            Value::One => 1,
            Value::Max => u64::MAX,
            Value::TopBit => 1u64 << (8 * width - 1),
            Value::Near(d) => current.wrapping_add_signed(i64::from(d)),
            Value::DeviceSectors(d) => (dev_bytes / 512).wrapping_add_signed(i64::from(d)),
            Value::Random(r) => r,
        };
        v & mask
    }
}

const MEMBER_BYTES: usize = 4 << 20;

fn get(bytes: &[u8], offset: usize, width: usize) -> u64 {
    let mut word = [0u8; 8];
    word[..width].copy_from_slice(&bytes[offset..offset + width]);
    u64::from_le_bytes(word)
}

fn put(bytes: &mut [u8], offset: usize, width: usize, value: u64) {
    bytes[offset..offset + width].copy_from_slice(&value.to_le_bytes()[..width]);
}

/// The array as planned: members (in slot order, then the spare) written by the real
/// create planner, with the superblock location of each.
pub fn make(shape: &Shape) -> Vec<Arc<Recording>> {
    let count = shape.disks + usize::from(shape.spare);
    let devices: Vec<Arc<Recording>> = (0..count).map(|i| Arc::new(Recording::new(format!("m{i}"), MEMBER_BYTES))).collect();
    let new = |i: usize| NewDevice { size_bytes: MEMBER_BYTES as u64, device_uuid: [i as u8 + 1; 16] };
    let mut req = CreateRequest::new(
        shape.level,
        "hostile",
        (0..shape.disks).map(|i| Some(new(i))).collect(),
        [0x42; 16],
        MdTime::from_parts(1_700_000_000, 0),
    );
    req.metadata = shape.metadata;
    req.initial_sync = InitialSync::AssumeClean;
    if shape.spare {
        req.spares = vec![new(shape.disks)];
    }
    if !matches!(shape.level, Level::Raid1 | Level::Linear) {
        req.chunk_bytes = Some(64 << 10);
    }
    if shape.bitmap {
        req.bitmap = Some(BitmapRequest { chunk_bytes: Some(64 << 10) });
    }
    let plan = plan_create(&req).unwrap_or_else(|e| panic!("{shape:?}: plan: {e}"));
    let dyns: Vec<Arc<dyn Member>> = devices.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    let members: Vec<Option<Arc<dyn Member>>> = dyns[..shape.disks].iter().cloned().map(Some).collect();
    uraid_engine::create::write_plan(&plan, &members, &dyns[shape.disks..]).unwrap_or_else(|e| panic!("{shape:?}: write: {e}"));
    for d in &devices {
        d.take_writes();
    }
    devices
}

/// The superblock on `device` (the one made by `make`), decoded without the checksum.
fn superblock_at(device: &Recording, metadata: MetadataVersion) -> Option<(u64, Superblock)> {
    let bytes = device.snapshot();
    let loc = superblock_locations(bytes.len() as u64).into_iter().find(|l| l.version == metadata)?;
    let raw = &bytes[loc.offset_bytes as usize..loc.offset_bytes as usize + loc.len_bytes];
    let sb = match metadata {
        MetadataVersion::V0_90 => Superblock::V090(Superblock090::decode_unverified(raw).ok()?),
        _ => Superblock::V1(Superblock1::decode_unverified(raw).ok()?),
    };
    Some((loc.offset_bytes, sb))
}

/// Applies the case's change to one device, fixing the checksum of what it changed.
fn mutate(device: &Recording, case: &Case) {
    let metadata = case.shape.metadata;
    let dev_bytes = device.size_bytes();
    let Some(loc) = superblock_locations(dev_bytes).into_iter().find(|l| l.version == metadata) else { return };
    let mut bytes = device.snapshot();
    let sb_at = loc.offset_bytes as usize;
    match case.target {
        Target::Superblock(_, offset, width) => {
            let sb = &mut bytes[sb_at..sb_at + loc.len_bytes];
            let value = case.value.resolve(width, get(sb, offset, width), dev_bytes);
            put(sb, offset, width, value);
            match metadata {
                MetadataVersion::V0_90 => {
                    if let Ok(decoded) = Superblock090::decode_unverified(sb) {
                        put(sb, 152, 4, u64::from(decoded.compute_checksum()));
                    }
                }
                _ => {
                    if let Ok(decoded) = Superblock1::decode_unverified(sb) {
                        put(sb, 216, 4, u64::from(decoded.compute_checksum()));
                    }
                }
            }
        }
        Target::Bitmap(_, offset, width) => {
            let Some((_, sb)) = superblock_at(device, metadata) else { return };
            let Some(at) = sb.bitmap_offset_bytes(loc.offset_bytes) else { return };
            let at = at as usize;
            if at + 256 > bytes.len() {
                return;
            }
            let head = &mut bytes[at..at + 256];
            let value = case.value.resolve(width, get(head, offset, width), dev_bytes);
            put(head, offset, width, value);
        }
    }
    device.poke(0, &bytes);
}

/// Sectors `start..end` of a member, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Region {
    what: &'static str,
    start: u64,
    end: u64,
}

impl Region {
    fn contains(&self, offset: u64, len: u64) -> bool {
        offset >= self.start && offset.checked_add(len).is_some_and(|end| end <= self.end)
    }
    fn overlaps(&self, other: &Region) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Where a member's data, superblock and bitmap are, by the superblock on it, computed
/// here from the raw fields (not with uraid's own checks, which are under test). `None`
/// when the device holds no decodable superblock at the case's location. `bitmap_bytes`:
/// the longest write-intent bitmap (its superblock and bits) on any device of the array,
/// as uraid writes the array's bitmap at every device's declared bitmap location.
fn regions(device: &Recording, metadata: MetadataVersion, bitmap_bytes: u64) -> Option<Vec<Region>> {
    let dev = device.size_bytes();
    let (sb_at, sb) = superblock_at(device, metadata)?;
    let (data, bitmap_at) = match &sb {
        // 0.90: everything below the superblock (md's `rdev->sectors = sb_start`).
        Superblock::V090(s) => {
            let end = sb090_offset_sectors(dev)? * 512;
            (Region { what: "data", start: 0, end }, s.has_bitmap().then_some(sb_at + 4096))
        }
        Superblock::V1(s) => {
            let start = s.data_offset_sectors.checked_mul(512)?;
            let end = s.data_offset_sectors.checked_add(s.data_size_sectors)?.checked_mul(512)?;
            let bitmap = s.bitmap_offset_sectors().and_then(|o| sb_at.checked_add_signed(i64::from(o) * 512));
            (Region { what: "data", start, end }, bitmap)
        }
    };
    let mut out = vec![data, Region { what: "superblock", start: sb_at, end: sb_at + 4096 }];
    if let Some(at) = bitmap_at {
        out.push(Region { what: "bitmap", start: at, end: at.saturating_add(bitmap_bytes.max(256)) });
    }
    Some(out)
}

/// The length of the write-intent bitmap (superblock and bits) on `device`, if it declares
/// one that decodes.
fn bitmap_bytes(device: &Recording, metadata: MetadataVersion) -> Option<u64> {
    let (sb_at, sb) = superblock_at(device, metadata)?;
    let at = sb.bitmap_offset_bytes(sb_at)? as usize;
    let bytes = device.snapshot();
    let b = BitmapSuperblock::decode(bytes.get(at..at.checked_add(256)?)?).ok()?;
    Some(256u64.saturating_add(b.bits_len_bytes()))
}

/// What happened to a case, for statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Refused,
    Served,
}

/// Runs one case and panics (with the case in the message) if the oracle is violated.
pub fn run(case: &Case) -> Outcome {
    if std::env::var_os("URAID_HOSTILE_TRACE").is_some() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "case {case:?}");
    }
    let devices = make(&case.shape);
    match case.device {
        Some(i) => mutate(&devices[i % devices.len()], case),
        None => devices.iter().for_each(|d| mutate(d, case)),
    }
    let dyns: Vec<Arc<dyn Member>> = devices.iter().map(|d| d.clone() as Arc<dyn Member>).collect();
    for d in &dyns {
        let _ = uraid_engine::scan::probe(d.as_ref());
    }
    // The layout each device's superblock gives, as it is before uraid writes anything.
    let bitmap = devices.iter().filter_map(|d| bitmap_bytes(d, case.shape.metadata)).max().unwrap_or(0);
    let layout: Vec<Option<Vec<Region>>> = devices.iter().map(|d| regions(d, case.shape.metadata, bitmap)).collect();
    let mut opts = ArrayOptions { writable: true, recovery_lanes: 1, ..Default::default() };
    opts.assemble.force = case.force;
    opts.assemble.run = true;
    let outcome = match Array::assemble(dyns, &opts) {
        Err(e) => {
            let text = e.to_string();
            assert!(!text.is_empty() && !text.contains('\n'), "{case:?}: refusal is not one line: {text:?}");
            Outcome::Refused
        }
        Ok((array, _)) => {
            exercise(&array, case);
            let _ = array.close();
            Outcome::Served
        }
    };
    if std::env::var_os("URAID_HOSTILE_TRACE").is_some() {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "outcome {outcome:?}");
    }
    for (i, d) in devices.iter().enumerate() {
        let writes = d.take_writes();
        if writes.is_empty() {
            continue;
        }
        let Some(regions) = &layout[i] else {
            panic!("{case:?}: m{i} has no superblock at its location, yet was written {writes:?}");
        };
        let data = regions[0];
        let dev = d.size_bytes();
        for r in &regions[1..] {
            assert!(!r.overlaps(&data), "{case:?}: m{i} was used although its {} {r:?} overlaps its data area {data:?}", r.what);
        }
        for r in regions {
            assert!(r.end <= dev, "{case:?}: m{i} was used although its {} {r:?} ends past the device ({dev} bytes)", r.what);
        }
        for (offset, len) in writes {
            assert!(
                regions.iter().any(|r| r.contains(offset, len)),
                "{case:?}: m{i} written outside its data area, superblock and bitmap: {len} bytes at {offset}; areas {regions:?}"
            );
        }
    }
    outcome
}

/// Writes at the start, the middle and the end of an accepted array and reads them back.
fn exercise(array: &Array, case: &Case) {
    let size = array.size_bytes();
    if size == 0 {
        return;
    }
    let len = size.min(96 << 10);
    for (n, offset) in [0, size / 2 - (size / 2).min(len / 2), size - len].into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(n as u8 + 1)).collect();
        match array.write(offset, &data) {
            Ok(()) => {
                let mut back = vec![0u8; len as usize];
                if array.read(offset, &mut back).is_ok() && array.failure().is_none() {
                    assert!(back == data, "{case:?}: {len} bytes written at {offset} read back different");
                }
            }
            Err(e) => {
                let text = e.to_string();
                assert!(!text.contains('\n'), "{case:?}: write error is not one line: {text:?}");
            }
        }
    }
}
