//! Array geometry: md layouts mapping array sectors to member sectors.
//!
//! Every function here is pure arithmetic copied in meaning (not in text) from Linux md:
//! `md-linear.c` (linear), `raid0.c` (`create_strip_zones`, `find_zone`, `map_sector`),
//! `raid1.c`, `raid5.c` (`raid5_compute_sector`, `raid5_compute_blocknr`, `raid6_d0`,
//! `raid6_idx_to_slot`) and `raid10.c` (`setup_geo`, `calc_sectors`, `__raid10_find_phys`,
//! `raid10_find_virt`). A wrong answer here silently scrambles a real md array, so each
//! level is tested against arrays made by Linux (see `tests/geometry_corpus.rs`).
//!
//! Units: every sector is 512 bytes. Member sectors are relative to the member's
//! `data_offset`; the caller adds it. Roles are md "raid_disk" slots, `0..raid_disks`.
//!
//! What the engine uses:
//! - [`Geometry::new`] from an [`ArraySpec`] (level, layout, chunk, disks, member sizes),
//! - [`Geometry::array_sectors`] for the exported size,
//! - [`Geometry::split`] to cut an array range into [`Piece`]s that each live in one
//!   place (one chunk, one zone, one member), with a [`Placement`] per piece,
//! - for raid4/5/6: [`ParityGeometry::stripe_roles`] (data roles in array order, P, Q and
//!   the GF(2^8) exponent md uses for each data block in Q) and
//!   [`ParityGeometry::unmap`] to turn a member sector back into an array sector,
//! - for raid1/raid10: the copies of each array sector ([`Raid10Geometry::copies`]).

mod linear;
mod parity;
mod raid0;
mod raid10;

pub use linear::LinearGeometry;
pub use parity::{Algorithm, Location, ParityGeometry, RoleKind, StripeRoles};
pub use raid0::{Raid0Geometry, Raid0Layout, StripZone};
pub use raid10::{FarSets, Raid10Geometry};

/// Bytes in one sector: md addresses everything in 512-byte units.
pub const SECTOR_BYTES: u64 = 512;

/// md RAID level, as stored in the superblock's `level` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// `-1`: members concatenated.
    Linear,
    /// `0`: striped, no redundancy; members may differ in size (strip zones).
    Raid0,
    /// `1`: every member holds the whole array.
    Raid1,
    /// `4`: striped with a dedicated parity member (the last one).
    Raid4,
    /// `5`: striped with rotating parity.
    Raid5,
    /// `6`: striped with P (xor) and Q (Reed-Solomon over GF(2^8)).
    Raid6,
    /// `10`: striped mirrors, near/far/offset copies.
    Raid10,
}

impl Level {
    /// The level from md's superblock `level` value (`-1` linear, `0`, `1`, `4`, `5`,
    /// `6`, `10`). Multipath (`-4`) and faulty (`-5`) are not arrays uraid serves.
    pub fn from_md(level: i32) -> Result<Level, GeometryError> {
        match level {
            -1 => Ok(Level::Linear),
            0 => Ok(Level::Raid0),
            1 => Ok(Level::Raid1),
            4 => Ok(Level::Raid4),
            5 => Ok(Level::Raid5),
            6 => Ok(Level::Raid6),
            10 => Ok(Level::Raid10),
            other => Err(GeometryError::UnsupportedLevel(other)),
        }
    }

    /// Whether the level keeps redundancy (everything but linear and RAID0): what a resync
    /// compares, a rebuild restores and a replace needs.
    pub fn has_redundancy(self) -> bool {
        !matches!(self, Level::Linear | Level::Raid0)
    }

    /// md's "can it survive these losses" rule, the one copy of it: can an array of this
    /// level serve all its data with the roles marked `present` (index = role, one entry
    /// per raid disk) and the rest lost? `layout` matters for RAID10 only. Whether a dirty
    /// parity array may start degraded is a further rule, in
    /// [`crate::assemble::has_enough_members`].
    pub fn serves_all_data(self, layout: u32, present: &[bool]) -> bool {
        let n = present.len();
        let lost = present.iter().filter(|p| !**p).count();
        n > 0
            && match self {
                Level::Linear | Level::Raid0 => lost == 0,
                Level::Raid1 => lost < n,
                Level::Raid4 | Level::Raid5 => lost <= 1,
                Level::Raid6 => lost <= 2,
                Level::Raid10 => crate::assemble::raid10_has_all_data(n as u32, layout, present),
            }
    }

    /// The superblock `level` value of this level.
    pub fn to_md(self) -> i32 {
        match self {
            Level::Linear => -1,
            Level::Raid0 => 0,
            Level::Raid1 => 1,
            Level::Raid4 => 4,
            Level::Raid5 => 5,
            Level::Raid6 => 6,
            Level::Raid10 => 10,
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Level::Linear => "linear",
            Level::Raid0 => "raid0",
            Level::Raid1 => "raid1",
            Level::Raid4 => "raid4",
            Level::Raid5 => "raid5",
            Level::Raid6 => "raid6",
            Level::Raid10 => "raid10",
        };
        f.write_str(name)
    }
}

/// A level name as mdadm's `--level` takes it, case-insensitive: `linear` (or `-1`), `0`
/// (`stripe`), `1` (`mirror`), `4`, `5`, `6`, `10`, each also with a `raid` prefix (`raid5`,
/// as mdadm --examine prints it).
impl std::str::FromStr for Level {
    type Err = UnknownLevel;

    fn from_str(s: &str) -> Result<Level, UnknownLevel> {
        let t = s.trim().to_ascii_lowercase();
        let t = t.strip_prefix("raid").unwrap_or(&t);
        Ok(match t {
            "linear" | "-1" => Level::Linear,
            "0" | "stripe" => Level::Raid0,
            "1" | "mirror" => Level::Raid1,
            "4" => Level::Raid4,
            "5" => Level::Raid5,
            "6" => Level::Raid6,
            "10" => Level::Raid10,
            _ => return Err(UnknownLevel(s.to_string())),
        })
    }
}

/// A level name [`Level`]'s `FromStr` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown level {0:?}: use linear, 0, 1, 4, 5, 6 or 10")]
pub struct UnknownLevel(pub String);

/// What md knows about an array's shape: enough to build its [`Geometry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    pub level: Level,
    /// The superblock `layout` field, as the raw 32-bit value (raid0 "unknown" is
    /// `0xffff_ffff` or `0`; linear and raid1 ignore it).
    pub layout: u32,
    /// Chunk size in sectors. Linear treats it as md's "rounding" (0 = none); raid1
    /// ignores it.
    pub chunk_sectors: u32,
    /// Number of active slots (`raid_disks`), including missing members.
    pub raid_disks: usize,
    /// Usable data sectors per role, indexed by role (`len() == raid_disks`).
    ///
    /// linear and raid0 use each member's own size (v1.x `data_size`, rounded down to
    /// the chunk by md). The other levels use one common size, md's `dev_sectors`,
    /// which is the superblock's `size` field: pass that for every role when it is
    /// known (the minimum of the entries is used).
    pub member_sectors: Vec<u64>,
}

/// A sector on one member, relative to that member's `data_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberSector {
    /// md role (`raid_disk` slot) of the member.
    pub role: usize,
    /// Sector on the member, counted from its `data_offset`.
    pub sector: u64,
}

/// Where the data of one array sector lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// linear and raid0: exactly one member holds the data.
    Single(MemberSector),
    /// raid1 and raid10: every listed member holds an identical copy, in md's own order
    /// (md reads the first usable one when it does not balance).
    Mirrored(Vec<MemberSector>),
    /// raid4/5/6: one member holds the data, protected by the parity of `stripe`.
    Striped(Location),
}

/// A run of array sectors that live contiguously in one [`Placement`]: the placement is
/// that of `array_sector`, and each following sector of the run is one sector further on
/// every member listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub array_sector: u64,
    pub sectors: u64,
    pub placement: Placement,
}

/// Why a geometry cannot be built or a sector cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("md level {0} is not supported")]
    UnsupportedLevel(i32),
    #[error("{level} layout {layout:#x} is not supported: {reason}")]
    UnsupportedLayout { level: Level, layout: u32, reason: &'static str },
    #[error("{level} chunk of {chunk_sectors} sectors is not valid: {reason}")]
    BadChunk { level: Level, chunk_sectors: u32, reason: &'static str },
    #[error("{level} needs at least {minimum} raid disks, got {raid_disks}")]
    TooFewDisks { level: Level, raid_disks: usize, minimum: usize },
    #[error("{level} supports at most {maximum} raid disks, got {raid_disks}")]
    TooManyDisks { level: Level, raid_disks: usize, maximum: usize },
    #[error("{raid_disks} raid disks but {sizes} member sizes given")]
    MemberCountMismatch { raid_disks: usize, sizes: usize },
    #[error("raid10 with {near} near and {far} far copies needs 2..={raid_disks} copies")]
    Raid10Copies { near: u32, far: u32, raid_disks: usize },
    #[error("array size overflows 64-bit sectors")]
    SizeOverflow,
    #[error("array sector {sector} is beyond the array end ({array_sectors} sectors)")]
    SectorOutOfRange { sector: u64, array_sectors: u64 },
    #[error("role {role} is not below raid_disks {raid_disks}")]
    RoleOutOfRange { role: usize, raid_disks: usize },
}

/// The shape of one md array: which member sectors hold which array sectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Geometry {
    Linear(LinearGeometry),
    Raid0(Raid0Geometry),
    /// raid1: every role holds the array at the same member sector.
    Raid1 {
        raid_disks: usize,
        array_sectors: u64,
    },
    /// raid4, raid5 and raid6.
    Parity(ParityGeometry),
    Raid10(Raid10Geometry),
}

impl Geometry {
    /// Builds the geometry md would use for `spec`, refusing what md refuses.
    pub fn new(spec: &ArraySpec) -> Result<Geometry, GeometryError> {
        if spec.member_sectors.len() != spec.raid_disks {
            return Err(GeometryError::MemberCountMismatch { raid_disks: spec.raid_disks, sizes: spec.member_sectors.len() });
        }
        match spec.level {
            Level::Linear => LinearGeometry::new(spec.chunk_sectors, &spec.member_sectors).map(Geometry::Linear),
            Level::Raid0 => Raid0Geometry::new(spec.layout, spec.chunk_sectors, &spec.member_sectors).map(Geometry::Raid0),
            Level::Raid1 => {
                if spec.raid_disks == 0 {
                    return Err(GeometryError::TooFewDisks { level: Level::Raid1, raid_disks: 0, minimum: 1 });
                }
                let array_sectors = common_member_sectors(&spec.member_sectors);
                Ok(Geometry::Raid1 { raid_disks: spec.raid_disks, array_sectors })
            }
            Level::Raid4 | Level::Raid5 | Level::Raid6 => ParityGeometry::new(
                spec.level,
                spec.layout,
                spec.chunk_sectors,
                spec.raid_disks,
                common_member_sectors(&spec.member_sectors),
            )
            .map(Geometry::Parity),
            Level::Raid10 => {
                Raid10Geometry::new(spec.layout, spec.chunk_sectors, spec.raid_disks, common_member_sectors(&spec.member_sectors))
                    .map(Geometry::Raid10)
            }
        }
    }

    pub fn level(&self) -> Level {
        match self {
            Geometry::Linear(_) => Level::Linear,
            Geometry::Raid0(_) => Level::Raid0,
            Geometry::Raid1 { .. } => Level::Raid1,
            Geometry::Parity(p) => p.level(),
            Geometry::Raid10(_) => Level::Raid10,
        }
    }

    pub fn raid_disks(&self) -> usize {
        match self {
            Geometry::Linear(g) => g.raid_disks(),
            Geometry::Raid0(g) => g.raid_disks(),
            Geometry::Raid1 { raid_disks, .. } => *raid_disks,
            Geometry::Parity(g) => g.raid_disks(),
            Geometry::Raid10(g) => g.raid_disks(),
        }
    }

    /// Chunk size in sectors for striped levels (raid0/4/5/6/10); `None` for linear
    /// and raid1, which have no stripes.
    pub fn chunk_sectors(&self) -> Option<u64> {
        match self {
            Geometry::Raid0(g) => Some(g.chunk_sectors()),
            Geometry::Parity(g) => Some(g.chunk_sectors()),
            Geometry::Raid10(g) => Some(g.chunk_sectors()),
            Geometry::Linear(_) | Geometry::Raid1 { .. } => None,
        }
    }

    /// Size of the array device in sectors, as md exports it.
    pub fn array_sectors(&self) -> u64 {
        match self {
            Geometry::Linear(g) => g.array_sectors(),
            Geometry::Raid0(g) => g.array_sectors(),
            Geometry::Raid1 { array_sectors, .. } => *array_sectors,
            Geometry::Parity(g) => g.array_sectors(),
            Geometry::Raid10(g) => g.array_sectors(),
        }
    }

    /// Where `array_sector` lives, and how many sectors from it on stay contiguous in
    /// that placement (up to the end of its chunk, zone or member).
    pub fn locate(&self, array_sector: u64) -> Result<Piece, GeometryError> {
        let array_sectors = self.array_sectors();
        if array_sector >= array_sectors {
            return Err(GeometryError::SectorOutOfRange { sector: array_sector, array_sectors });
        }
        let (placement, sectors) = match self {
            Geometry::Linear(g) => {
                let (at, run) = g.map(array_sector)?;
                (Placement::Single(at), run)
            }
            Geometry::Raid0(g) => {
                let (at, run) = g.map(array_sector)?;
                (Placement::Single(at), run)
            }
            Geometry::Raid1 { raid_disks, .. } => {
                let copies = (0..*raid_disks).map(|role| MemberSector { role, sector: array_sector }).collect();
                (Placement::Mirrored(copies), array_sectors - array_sector)
            }
            Geometry::Parity(g) => {
                let at = g.map(array_sector)?;
                let run = g.chunk_sectors() - at.member_sector % g.chunk_sectors();
                (Placement::Striped(at), run)
            }
            Geometry::Raid10(g) => {
                let copies = g.copies(array_sector)?;
                let run = g.chunk_sectors() - array_sector % g.chunk_sectors();
                (Placement::Mirrored(copies), run)
            }
        };
        Ok(Piece { array_sector, sectors: sectors.min(array_sectors - array_sector), placement })
    }

    /// Cuts `sectors` array sectors starting at `array_sector` into pieces that each
    /// have one placement. Errors if the range runs past the array end.
    pub fn split(&self, array_sector: u64, sectors: u64) -> Result<Vec<Piece>, GeometryError> {
        let array_sectors = self.array_sectors();
        let end = array_sector
            .checked_add(sectors)
            .filter(|end| *end <= array_sectors)
            .ok_or(GeometryError::SectorOutOfRange { sector: array_sector.saturating_add(sectors), array_sectors })?;
        let mut pieces = Vec::new();
        let mut at = array_sector;
        while at < end {
            let mut piece = self.locate(at)?;
            piece.sectors = piece.sectors.min(end - at);
            at += piece.sectors;
            pieces.push(piece);
        }
        Ok(pieces)
    }

    /// The array sector whose data (or a copy of it) sits at `member_sector` of `role`;
    /// `None` for parity, for unused member space, and past the array end.
    pub fn unmap(&self, role: usize, member_sector: u64) -> Result<Option<u64>, GeometryError> {
        let raid_disks = self.raid_disks();
        if role >= raid_disks {
            return Err(GeometryError::RoleOutOfRange { role, raid_disks });
        }
        Ok(match self {
            Geometry::Linear(g) => g.unmap(role, member_sector),
            Geometry::Raid0(g) => g.unmap(role, member_sector),
            Geometry::Raid1 { array_sectors, .. } => (member_sector < *array_sectors).then_some(member_sector),
            Geometry::Parity(g) => g.unmap(role, member_sector),
            Geometry::Raid10(g) => g.unmap(role, member_sector),
        })
    }

    /// The parity geometry, for raid4/5/6.
    pub fn as_parity(&self) -> Option<&ParityGeometry> {
        match self {
            Geometry::Parity(g) => Some(g),
            _ => None,
        }
    }
}

/// md's `dev_sectors` for levels where every member contributes the same amount: the
/// smallest member bounds all of them.
fn common_member_sectors(member_sectors: &[u64]) -> u64 {
    member_sectors.iter().copied().min().unwrap_or(0)
}

#[cfg(test)]
mod level_name_tests {
    use super::Level;

    const ALL: [Level; 7] = [Level::Linear, Level::Raid0, Level::Raid1, Level::Raid4, Level::Raid5, Level::Raid6, Level::Raid10];

    #[test]
    fn every_level_parses_from_its_display_name_its_md_number_and_mdadm_aliases() {
        for l in ALL {
            assert_eq!(l.to_string().parse::<Level>(), Ok(l));
            assert_eq!(l.to_md().to_string().parse::<Level>(), Ok(l));
            assert_eq!(l.to_string().to_uppercase().parse::<Level>(), Ok(l));
        }
        assert_eq!("stripe".parse::<Level>(), Ok(Level::Raid0));
        assert_eq!("mirror".parse::<Level>(), Ok(Level::Raid1));
        for bad in ["", "2", "3", "raid", "multipath", "raid60"] {
            let e = bad.parse::<Level>().unwrap_err();
            assert!(e.to_string().contains("unknown level"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_linear_and_raid0_lack_redundancy() {
        let without: Vec<Level> = ALL.into_iter().filter(|l| !l.has_redundancy()).collect();
        assert_eq!(without, [Level::Linear, Level::Raid0]);
    }
}
