//! md raid4/5/6: striping with parity (raid5.c `raid5_compute_sector`,
//! `raid5_compute_blocknr`, and the raid6 syndrome order of `raid6_d0` /
//! `raid6_idx_to_slot`).
//!
//! Array chunk `c` belongs to stripe `c / data_disks` and is data block `c % data_disks`
//! of it. Every member's chunk of stripe `s` starts at member sector `s * chunk`; the
//! layout algorithm only decides which member holds which block of the stripe.

use super::{GeometryError, Level};

/// md's raid5/raid6 layout algorithms (`include/linux/raid/md_p.h` / raid5.h values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// 0: parity rotates from the last member down; data fills members in order.
    LeftAsymmetric,
    /// 1: parity rotates from the first member up; data fills members in order.
    RightAsymmetric,
    /// 2 (md's default): parity rotates down; data starts just after parity and wraps.
    LeftSymmetric,
    /// 3: parity rotates up; data starts just after parity and wraps.
    RightSymmetric,
    /// 4: parity (P, then Q for raid6) on the first members.
    ParityFirst,
    /// 5: parity on the last members (P, then Q for raid6); raid4 is this too.
    ParityLast,
    /// 8, raid6 only (DDF): as right-asymmetric, Q computed over slots by member index.
    RotatingZeroRestart,
    /// 9, raid6 only (DDF): as left-asymmetric, but the first stripe is `D D D P Q`.
    RotatingNRestart,
    /// 10, raid6 only (DDF): as left-symmetric but Q sits before P.
    RotatingNContinue,
    /// 16, raid6 only: raid5 left-asymmetric over all but the last member, Q on the last.
    LeftAsymmetric6,
    /// 17, raid6 only: raid5 right-asymmetric plus Q on the last member.
    RightAsymmetric6,
    /// 18, raid6 only: raid5 left-symmetric plus Q on the last member.
    LeftSymmetric6,
    /// 19, raid6 only: raid5 right-symmetric plus Q on the last member.
    RightSymmetric6,
    /// 20, raid6 only: raid5 parity-first plus Q on the last member.
    ParityFirst6,
}

impl Algorithm {
    /// The algorithm for a superblock `layout` value, whatever the level.
    pub fn from_md(layout: u32) -> Option<Algorithm> {
        Some(match layout {
            0 => Algorithm::LeftAsymmetric,
            1 => Algorithm::RightAsymmetric,
            2 => Algorithm::LeftSymmetric,
            3 => Algorithm::RightSymmetric,
            4 => Algorithm::ParityFirst,
            5 => Algorithm::ParityLast,
            8 => Algorithm::RotatingZeroRestart,
            9 => Algorithm::RotatingNRestart,
            10 => Algorithm::RotatingNContinue,
            16 => Algorithm::LeftAsymmetric6,
            17 => Algorithm::RightAsymmetric6,
            18 => Algorithm::LeftSymmetric6,
            19 => Algorithm::RightSymmetric6,
            20 => Algorithm::ParityFirst6,
            _ => return None,
        })
    }

    pub fn to_md(self) -> u32 {
        match self {
            Algorithm::LeftAsymmetric => 0,
            Algorithm::RightAsymmetric => 1,
            Algorithm::LeftSymmetric => 2,
            Algorithm::RightSymmetric => 3,
            Algorithm::ParityFirst => 4,
            Algorithm::ParityLast => 5,
            Algorithm::RotatingZeroRestart => 8,
            Algorithm::RotatingNRestart => 9,
            Algorithm::RotatingNContinue => 10,
            Algorithm::LeftAsymmetric6 => 16,
            Algorithm::RightAsymmetric6 => 17,
            Algorithm::LeftSymmetric6 => 18,
            Algorithm::RightSymmetric6 => 19,
            Algorithm::ParityFirst6 => 20,
        }
    }

    /// md's raid5 accepts 0..=5 (`algorithm_valid_raid5`).
    pub fn valid_for_raid5(self) -> bool {
        self.to_md() <= 5
    }

    /// DDF layouts order Q's inputs by member index, not by walking from after Q.
    pub fn is_ddf(self) -> bool {
        matches!(self, Algorithm::RotatingZeroRestart | Algorithm::RotatingNRestart | Algorithm::RotatingNContinue)
    }

    /// mdadm's name for the layout.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::LeftAsymmetric => "left-asymmetric",
            Algorithm::RightAsymmetric => "right-asymmetric",
            Algorithm::LeftSymmetric => "left-symmetric",
            Algorithm::RightSymmetric => "right-symmetric",
            Algorithm::ParityFirst => "parity-first",
            Algorithm::ParityLast => "parity-last",
            Algorithm::RotatingZeroRestart => "ddf-zero-restart",
            Algorithm::RotatingNRestart => "ddf-N-restart",
            Algorithm::RotatingNContinue => "ddf-N-continue",
            Algorithm::LeftAsymmetric6 => "left-asymmetric-6",
            Algorithm::RightAsymmetric6 => "right-asymmetric-6",
            Algorithm::LeftSymmetric6 => "left-symmetric-6",
            Algorithm::RightSymmetric6 => "right-symmetric-6",
            Algorithm::ParityFirst6 => "parity-first-6",
        }
    }
}

/// Where one array sector lives in a parity array.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Location {
    /// Stripe number; every member's chunk of it starts at `stripe * chunk_sectors`.
    pub stripe: u64,
    /// Index of the data block within the stripe, in array order (`0..data_disks`).
    pub data_index: usize,
    /// Member role holding that data block.
    pub role: usize,
    /// Sector on that member, relative to its data offset.
    pub member_sector: u64,
}

/// What a member holds in one stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    /// Data block with this index in array order.
    Data(usize),
    P,
    Q,
}

/// Which member holds which block of one stripe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeRoles {
    /// `data[i]` is the role holding data block `i` (array order: block `i` of stripe
    /// `s` is array chunk `s * data_disks + i`).
    pub data: Vec<usize>,
    /// Role holding P, the xor of all data blocks.
    pub p: usize,
    /// Role holding Q (raid6 only).
    pub q: Option<usize>,
    /// raid6: `q_exponents[i]` is `k` such that md computes Q = Σ 2^k · data[i] over
    /// GF(2^8) (polynomial 0x11D). It is NOT the array order: md feeds Q its data
    /// blocks walking members from just after Q (or by member index for DDF layouts).
    /// Empty for raid4/5.
    pub q_exponents: Vec<u8>,
    /// raid6: how many source slots md's `gen_syndrome` gets (data disks, or all
    /// members for DDF layouts where P/Q slots are fed zeros). 0 for raid4/5.
    pub syndrome_slots: usize,
}

impl StripeRoles {
    /// What `role` holds in this stripe.
    pub fn kind_of(&self, role: usize) -> Option<RoleKind> {
        if role == self.p {
            return Some(RoleKind::P);
        }
        if Some(role) == self.q {
            return Some(RoleKind::Q);
        }
        self.data.iter().position(|&r| r == role).map(RoleKind::Data)
    }

    /// raid6: md's syndrome source list. Entry `k` is the data index whose block is
    /// multiplied by 2^k in Q, or `None` for a slot md fills with zeros (DDF layouts).
    /// A kernel computing Q = Σ 2^k · src[k] over these slots matches md.
    pub fn syndrome_sources(&self) -> Vec<Option<usize>> {
        let mut slots = vec![None; self.syndrome_slots];
        for (index, &exponent) in self.q_exponents.iter().enumerate() {
            if let Some(slot) = slots.get_mut(usize::from(exponent)) {
                *slot = Some(index);
            }
        }
        slots
    }
}

/// raid4/5/6 geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParityGeometry {
    level: Level,
    algorithm: Algorithm,
    chunk_sectors: u64,
    raid_disks: usize,
    data_disks: usize,
    /// Stripes in the array: md's dev_sectors rounded down to the chunk, in chunks.
    stripes: u64,
}

/// The exponent is stored in a byte; md's GF(2^8) Q cannot tell more slots apart anyway.
const MAX_PARITY_DISKS: usize = 256;

impl ParityGeometry {
    /// `member_sectors` is md's `dev_sectors`: the data size every member contributes.
    pub fn new(level: Level, layout: u32, chunk_sectors: u32, raid_disks: usize, member_sectors: u64) -> Result<Self, GeometryError> {
        let (algorithm, parity_disks, minimum) = match level {
            // md's raid4 ignores the layout: parity is always on the last member.
            Level::Raid4 => (Algorithm::ParityLast, 1, 2),
            Level::Raid5 => {
                let algorithm = Algorithm::from_md(layout).filter(|a| a.valid_for_raid5()).ok_or(GeometryError::UnsupportedLayout {
                    level,
                    layout,
                    reason: "raid5 layouts are left-asymmetric (0), right-asymmetric (1), left-symmetric (2), right-symmetric (3), parity-first (4) and parity-last (5)",
                })?;
                (algorithm, 1, 2)
            }
            Level::Raid6 => {
                let algorithm = Algorithm::from_md(layout).ok_or(GeometryError::UnsupportedLayout {
                    level,
                    layout,
                    reason: "raid6 layouts are 0 to 5 (the raid5 ones), 8 to 10 (ddf) and 16 to 20 (the raid5 ones with Q last, *-6)",
                })?;
                (algorithm, 2, 4)
            }
            _ => {
                return Err(GeometryError::UnsupportedLevel(level.to_md()));
            }
        };
        if raid_disks < minimum {
            return Err(GeometryError::TooFewDisks { level, raid_disks, minimum });
        }
        if raid_disks > MAX_PARITY_DISKS {
            return Err(GeometryError::TooManyDisks { level, raid_disks, maximum: MAX_PARITY_DISKS });
        }
        // raid5.c refuses chunks that are not a power of two or not whole 4 KiB pages.
        if chunk_sectors < 8 || !chunk_sectors.is_power_of_two() {
            return Err(GeometryError::BadChunk { level, chunk_sectors, reason: "must be a power of two of at least 4 KiB" });
        }
        let chunk = u64::from(chunk_sectors);
        let data_disks = raid_disks - parity_disks;
        let stripes = member_sectors / chunk;
        stripes.checked_mul(chunk).and_then(|s| s.checked_mul(data_disks as u64)).ok_or(GeometryError::SizeOverflow)?;
        Ok(ParityGeometry { level, algorithm, chunk_sectors: chunk, raid_disks, data_disks, stripes })
    }

    pub fn level(&self) -> Level {
        self.level
    }

    /// The layout algorithm (raid4 reports `ParityLast`, which is what it is).
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub fn chunk_sectors(&self) -> u64 {
        self.chunk_sectors
    }

    pub fn raid_disks(&self) -> usize {
        self.raid_disks
    }

    /// Data blocks per stripe.
    pub fn data_disks(&self) -> usize {
        self.data_disks
    }

    pub fn stripes(&self) -> u64 {
        self.stripes
    }

    /// Sectors each member uses (whole stripes only).
    pub fn member_sectors(&self) -> u64 {
        self.stripes * self.chunk_sectors
    }

    pub fn array_sectors(&self) -> u64 {
        self.stripes * self.chunk_sectors * self.data_disks as u64
    }

    /// Member sector where every member's chunk of `stripe` starts.
    pub fn stripe_member_sector(&self, stripe: u64) -> u64 {
        stripe * self.chunk_sectors
    }

    /// Array sector where `stripe`'s first data block starts.
    pub fn stripe_array_sector(&self, stripe: u64) -> u64 {
        stripe * self.stripe_data_sectors()
    }

    /// Array sectors in one stripe.
    pub fn stripe_data_sectors(&self) -> u64 {
        self.chunk_sectors * self.data_disks as u64
    }

    fn is_raid6(&self) -> bool {
        self.level == Level::Raid6
    }

    /// P and Q roles of `stripe`, and the role of data block `data_index`: a transcription
    /// of md's `raid5_compute_sector` switch, kept in its shape so it can be read against
    /// the kernel.
    fn compute(&self, stripe: u64, data_index: usize) -> (usize, usize, Option<usize>) {
        let n = self.raid_disks;
        let data_disks = self.data_disks;
        let dd = data_index;
        // The remainders are below raid_disks, so they fit a usize.
        let rot = |modulus: usize| (stripe % modulus as u64) as usize;
        if self.level == Level::Raid4 {
            return (dd, data_disks, None);
        }
        if !self.is_raid6() {
            return match self.algorithm {
                Algorithm::LeftAsymmetric => {
                    let pd = data_disks - rot(n);
                    (if dd >= pd { dd + 1 } else { dd }, pd, None)
                }
                Algorithm::RightAsymmetric => {
                    let pd = rot(n);
                    (if dd >= pd { dd + 1 } else { dd }, pd, None)
                }
                Algorithm::LeftSymmetric => {
                    let pd = data_disks - rot(n);
                    ((pd + 1 + dd) % n, pd, None)
                }
                Algorithm::RightSymmetric => {
                    let pd = rot(n);
                    ((pd + 1 + dd) % n, pd, None)
                }
                Algorithm::ParityFirst => (dd + 1, 0, None),
                // Validation keeps raid5 to 0..=5, so anything else is parity-last.
                _ => (dd, data_disks, None),
            };
        }
        // raid6: "Q D D D P" when P is on the last member, else "D D P Q D".
        let asymmetric = |pd: usize| {
            if pd == n - 1 {
                (dd + 1, pd, Some(0))
            } else if dd >= pd {
                (dd + 2, pd, Some(pd + 1))
            } else {
                (dd, pd, Some(pd + 1))
            }
        };
        match self.algorithm {
            Algorithm::LeftAsymmetric => asymmetric(n - 1 - rot(n)),
            Algorithm::RightAsymmetric | Algorithm::RotatingZeroRestart => asymmetric(rot(n)),
            Algorithm::RotatingNRestart => {
                // md adds one to the stripe so the first stripe is "D D D P Q".
                let pd = n - 1 - ((stripe % n as u64 + 1) % n as u64) as usize;
                asymmetric(pd)
            }
            Algorithm::LeftSymmetric => {
                let pd = n - 1 - rot(n);
                ((pd + 2 + dd) % n, pd, Some((pd + 1) % n))
            }
            Algorithm::RightSymmetric => {
                let pd = rot(n);
                ((pd + 2 + dd) % n, pd, Some((pd + 1) % n))
            }
            Algorithm::ParityFirst => (dd + 2, 0, Some(1)),
            Algorithm::ParityLast => (dd, data_disks, Some(data_disks + 1)),
            Algorithm::RotatingNContinue => {
                let pd = n - 1 - rot(n);
                ((pd + 1 + dd) % n, pd, Some((pd + n - 1) % n))
            }
            Algorithm::LeftAsymmetric6 => {
                let pd = data_disks - rot(n - 1);
                (if dd >= pd { dd + 1 } else { dd }, pd, Some(n - 1))
            }
            Algorithm::RightAsymmetric6 => {
                let pd = rot(n - 1);
                (if dd >= pd { dd + 1 } else { dd }, pd, Some(n - 1))
            }
            Algorithm::LeftSymmetric6 => {
                let pd = data_disks - rot(n - 1);
                ((pd + 1 + dd) % (n - 1), pd, Some(n - 1))
            }
            Algorithm::RightSymmetric6 => {
                let pd = rot(n - 1);
                ((pd + 1 + dd) % (n - 1), pd, Some(n - 1))
            }
            Algorithm::ParityFirst6 => (dd + 1, 0, Some(n - 1)),
        }
    }

    /// Roles holding P and Q in `stripe`.
    pub fn parity_roles(&self, stripe: u64) -> (usize, Option<usize>) {
        let (_, p, q) = self.compute(stripe, 0);
        (p, q)
    }

    /// Where array sector `array_sector` lives.
    pub fn map(&self, array_sector: u64) -> Result<Location, GeometryError> {
        let array_sectors = self.array_sectors();
        if array_sector >= array_sectors {
            return Err(GeometryError::SectorOutOfRange { sector: array_sector, array_sectors });
        }
        let chunk_number = array_sector / self.chunk_sectors;
        let offset = array_sector % self.chunk_sectors;
        let stripe = chunk_number / self.data_disks as u64;
        let data_index = (chunk_number % self.data_disks as u64) as usize;
        let (role, _, _) = self.compute(stripe, data_index);
        Ok(Location { stripe, data_index, role, member_sector: stripe * self.chunk_sectors + offset })
    }

    /// The role holding data block `data_index` of `stripe`.
    pub fn data_role(&self, stripe: u64, data_index: usize) -> Option<usize> {
        (data_index < self.data_disks).then(|| self.compute(stripe, data_index).0)
    }

    /// What `role` holds in `stripe` (md's `raid5_compute_blocknr`, without the
    /// sector arithmetic).
    pub fn kind_of(&self, stripe: u64, role: usize) -> Option<RoleKind> {
        if role >= self.raid_disks {
            return None;
        }
        let (pd, qd) = self.parity_roles(stripe);
        if role == pd {
            return Some(RoleKind::P);
        }
        if Some(role) == qd {
            return Some(RoleKind::Q);
        }
        let n = self.raid_disks;
        let index = match self.algorithm {
            // Symmetric layouts: data starts after the parity and wraps around the
            // members that rotate (all but Q's fixed member for the *_6 layouts).
            Algorithm::LeftSymmetric | Algorithm::RightSymmetric => {
                let first = if self.is_raid6() { pd + 2 } else { pd + 1 };
                (role + 2 * n - first) % n
            }
            Algorithm::RotatingNContinue => (role + n - (pd + 1)) % n,
            Algorithm::LeftSymmetric6 | Algorithm::RightSymmetric6 => (role + (n - 1) - (pd + 1)) % (n - 1),
            // Every other layout fills data members in role order around P and Q.
            _ => {
                let below = usize::from(pd < role) + usize::from(qd.is_some_and(|q| q < role));
                role - below
            }
        };
        Some(RoleKind::Data(index))
    }

    /// Which member holds which block of `stripe`, and md's Q coefficients.
    pub fn stripe_roles(&self, stripe: u64) -> StripeRoles {
        let n = self.raid_disks;
        let data: Vec<usize> = (0..self.data_disks).map(|i| self.compute(stripe, i).0).collect();
        let (p, q) = self.parity_roles(stripe);
        let (q_exponents, syndrome_slots) = match q {
            None => (Vec::new(), 0),
            Some(_) if self.algorithm.is_ddf() => {
                // DDF: raid6_idx_to_slot counts every member from 0, so a data block's
                // slot is its member index; P and Q's slots are fed zeros.
                (data.iter().map(|&r| r as u8).collect(), n)
            }
            Some(qd) => {
                // raid6_d0: md walks members starting just after Q (member 0 when Q is
                // last), numbering data members as it meets them.
                let d0 = if qd == n - 1 { 0 } else { qd + 1 };
                let walk = |role: usize| (role + n - d0) % n;
                let exponents = data
                    .iter()
                    .map(|&role| {
                        let position = walk(role);
                        let skipped = usize::from(walk(p) < position) + usize::from(walk(qd) < position);
                        (position - skipped) as u8
                    })
                    .collect();
                (exponents, self.data_disks)
            }
        };
        StripeRoles { data, p, q, q_exponents, syndrome_slots }
    }

    /// The array sector stored at `member_sector` of `role`; `None` for P/Q and for
    /// sectors past the last whole stripe.
    pub fn unmap(&self, role: usize, member_sector: u64) -> Option<u64> {
        let stripe = member_sector / self.chunk_sectors;
        if stripe >= self.stripes {
            return None;
        }
        let offset = member_sector % self.chunk_sectors;
        match self.kind_of(stripe, role)? {
            RoleKind::Data(index) => Some((stripe * self.data_disks as u64 + index as u64) * self.chunk_sectors + offset),
            RoleKind::P | RoleKind::Q => None,
        }
    }
}
