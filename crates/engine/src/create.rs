//! Writing a planned array (`uraid_core::metadata::create`) onto devices: superblocks,
//! internal bitmaps, and nothing else (md does not zero member data either; the initial
//! resync or recovery makes redundancy consistent).

use crate::member::Member;
use crate::scan::probe;
use std::sync::Arc;
use uraid_core::metadata::create::{CreatePlan, DeviceRef};
use uraid_core::metadata::superblock_locations;

#[derive(Debug, thiserror::Error)]
pub enum CreateIoError {
    #[error("{device} already holds an md superblock (array {uuid}); use --force to overwrite it")]
    HoldsArray { device: String, uuid: String },
    #[error("{device} holds a {what} signature; use --force to overwrite it")]
    HoldsFilesystem { device: String, what: &'static str },
    #[error("writing {device}: {source}")]
    Io { device: String, source: std::io::Error },
}

/// Known signatures at fixed offsets (offset, magic, name): enough to stop the common
/// "wrong disk" mistake, not a full blkid.
const SIGNATURES: &[(u64, &[u8], &str)] = &[
    (1080, &[0x53, 0xef], "ext2/3/4"),
    (0, b"XFSB", "xfs"),
    (65600, b"_BHRfS_M", "btrfs"),
    (4086, b"SWAPSPACE2", "swap"),
    (510, &[0x55, 0xaa], "partition table (MBR)"),
    (512, b"EFI PART", "GPT partition table"),
    (0, b"LUKS\xba\xbe", "LUKS"),
];

/// Refuses a device that already carries an md superblock or a known signature.
pub fn check_device_is_free(member: &dyn Member) -> Result<(), CreateIoError> {
    let p = probe(member);
    if let Some((_, sb)) = p.any() {
        return Err(CreateIoError::HoldsArray { device: member.label().into(), uuid: sb.array_uuid().to_string() });
    }
    for (off, magic, what) in SIGNATURES {
        let mut buf = vec![0u8; magic.len()];
        if member.read_at(&mut buf, *off).is_ok() && buf == *magic {
            return Err(CreateIoError::HoldsFilesystem { device: member.label().into(), what });
        }
    }
    Ok(())
}

/// Writes `plan` onto the devices: `members[slot]` (None = missing) and `spares`.
/// Superblock locations of other metadata versions are cleared, so only the new array is
/// found on the device afterwards.
pub fn write_plan(plan: &CreatePlan, members: &[Option<Arc<dyn Member>>], spares: &[Arc<dyn Member>]) -> Result<(), CreateIoError> {
    for planned in &plan.devices {
        let member = match planned.device {
            DeviceRef::Member(i) => members.get(i).cloned().flatten(),
            DeviceRef::Spare(i) => spares.get(i).cloned(),
        };
        let Some(member) = member else { continue };
        let io = |e: std::io::Error| CreateIoError::Io { device: member.label().into(), source: e };
        for loc in superblock_locations(member.size_bytes()) {
            if loc.offset_bytes != planned.superblock_offset_bytes {
                member.write_at(&vec![0u8; loc.len_bytes], loc.offset_bytes).map_err(io)?;
            }
        }
        if let Some(bitmap) = &planned.bitmap {
            member.write_at(&bitmap.encode(), bitmap.offset_bytes).map_err(io)?;
        }
        member.write_at(&planned.superblock_bytes(), planned.superblock_offset_bytes).map_err(io)?;
        member.flush().map_err(io)?;
    }
    Ok(())
}

/// An array in a few numbers, created over given devices with the real create planner: the
/// one fixture of the test suites, the simulator, the bench and the examples (each used to
/// write its own). Members are named by their position: device uuid `[i + 1; 16]`, spares
/// `[101 + i; 16]`; the ctime is fixed, so two sketches of one shape write the same bytes.
#[derive(Debug, Clone)]
pub struct ArraySketch {
    pub level: uraid_core::geometry::Level,
    pub name: String,
    pub layout: Option<u32>,
    /// Chunk size; not asked for RAID1, which has none.
    pub chunk_kib: u32,
    pub metadata: uraid_core::metadata::MetadataVersion,
    pub sync: uraid_core::metadata::create::InitialSync,
    /// An internal write-intent bitmap with this many bytes per bit.
    pub bitmap_chunk: Option<u32>,
    pub array_uuid: [u8; 16],
}

impl ArraySketch {
    /// 64 KiB chunks, v1.2, assume-clean (no initial sync), no bitmap.
    pub fn new(level: uraid_core::geometry::Level, name: impl Into<String>) -> ArraySketch {
        ArraySketch {
            level,
            name: name.into(),
            layout: None,
            chunk_kib: 64,
            metadata: uraid_core::metadata::MetadataVersion::V1_2,
            sync: uraid_core::metadata::create::InitialSync::AssumeClean,
            bitmap_chunk: None,
            array_uuid: [0x42; 16],
        }
    }

    /// The create request for `members` and `spares` (sizes from the devices).
    pub fn request(&self, members: &[Arc<dyn Member>], spares: &[Arc<dyn Member>]) -> uraid_core::metadata::create::CreateRequest {
        use uraid_core::metadata::create::{BitmapRequest, CreateRequest, NewDevice};
        let new = |i: usize, m: &Arc<dyn Member>| NewDevice { size_bytes: m.size_bytes(), device_uuid: [i as u8 + 1; 16] };
        let mut req = CreateRequest::new(
            self.level,
            self.name.clone(),
            members.iter().enumerate().map(|(i, m)| Some(new(i, m))).collect(),
            self.array_uuid,
            uraid_core::metadata::sb1::MdTime::from_parts(1_700_000_000, 0),
        );
        req.spares = spares.iter().enumerate().map(|(i, m)| new(100 + i, m)).collect();
        req.layout = self.layout;
        req.metadata = self.metadata;
        if !matches!(self.level, uraid_core::geometry::Level::Raid1) {
            req.chunk_bytes = Some(self.chunk_kib * 1024);
        }
        req.initial_sync = self.sync;
        req.bitmap = self.bitmap_chunk.map(|c| BitmapRequest { chunk_bytes: Some(c) });
        req
    }

    /// Plans the array and writes its metadata onto `members` and `spares`.
    pub fn write(&self, members: &[Arc<dyn Member>], spares: &[Arc<dyn Member>]) -> Result<(), String> {
        let plan = uraid_core::metadata::create::plan_create(&self.request(members, spares)).map_err(|e| format!("plan: {e}"))?;
        let m: Vec<Option<Arc<dyn Member>>> = members.iter().cloned().map(Some).collect();
        write_plan(&plan, &m, spares).map_err(|e| e.to_string())
    }

    /// [`ArraySketch::write`], then assembled writable.
    pub fn create(&self, members: &[Arc<dyn Member>], spares: &[Arc<dyn Member>]) -> Result<crate::Array, String> {
        self.write(members, spares)?;
        let devices: Vec<Arc<dyn Member>> = members.iter().chain(spares).cloned().collect();
        let opts = crate::ArrayOptions { writable: true, ..Default::default() };
        crate::Array::assemble(devices, &opts).map(|(a, _)| a).map_err(|e| format!("assemble: {e}"))
    }
}

/// `n` zeroed in-memory devices of `bytes` each, labelled `{tag}0`, `{tag}1`, …
pub fn mem_devices(n: usize, bytes: usize, tag: &str) -> Vec<Arc<crate::MemMember>> {
    (0..n).map(|i| Arc::new(crate::MemMember::zeroed(format!("{tag}{i}"), bytes))).collect()
}

/// The same devices as `Member`s.
pub fn as_members<M: Member + 'static>(devices: &[Arc<M>]) -> Vec<Arc<dyn Member>> {
    devices.iter().map(|d| d.clone() as Arc<dyn Member>).collect()
}
