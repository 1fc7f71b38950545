//! md reshapes: an array moved from one shape to another (more or fewer members, another
//! chunk, layout or level) while it stays in use, with md's on-disk protocol
//! ([`ReshapingArray`]).

mod backup;
mod overlay;
mod raid0;
mod reshaping;
mod resize;
mod takeover;

pub use backup::ReshapeBackup;
pub use raid0::{finish_raid0_grow, start_raid0_grow};
pub use reshaping::{ReshapeStep, ReshapingArray, DEFAULT_WINDOW_BYTES};
pub use resize::resize;
pub use takeover::take_over;

use crate::array::{Array, ArrayOptions, DeviceState, EngineError};
use crate::member::Member;
use std::sync::Arc;
use uraid_core::geometry::SECTOR_BYTES;
use uraid_core::metadata::{Superblock, Superblock1};

/// Assembles the stopped array on `devices` read-only and checks that its shape may change
/// as md requires (clean, not degraded, every device given part of it); returns its spares
/// by `dev_number`. `what`: the change, for messages.
fn spares_of_a_changeable_array(devices: &[Arc<dyn Member>], opts: &ArrayOptions, what: &str) -> Result<Vec<u32>, EngineError> {
    spares_of_a_changeable_array_missing(devices, opts, what, MayMiss::Nothing)
}

/// Roles a change accepts missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MayMiss {
    Nothing,
    /// This role only (RAID4/5 -> RAID0: md wants the parity member gone).
    Role(u32),
    /// Any the array can run without, under the `--run` rule (a reshape: md reshapes a
    /// degraded array, which stays degraded).
    Any,
}

/// [`spares_of_a_changeable_array`], also accepting the missing roles `may_miss` allows.
fn spares_of_a_changeable_array_missing(
    devices: &[Arc<dyn Member>],
    opts: &ArrayOptions,
    what: &str,
    may_miss: MayMiss,
) -> Result<Vec<u32>, EngineError> {
    let mut assemble = opts.assemble;
    assemble.run |= matches!(may_miss, MayMiss::Role(_));
    let (array, report) = Array::assemble(devices.to_vec(), &ArrayOptions { writable: false, assemble, ..*opts })?;
    if report.needs_resync {
        return Err(EngineError::Refused(format!(
            "the array was not shut down cleanly: let its resync finish (uraid serve) before {what}"
        )));
    }
    let accepted = match may_miss {
        MayMiss::Nothing => false,
        MayMiss::Role(role) => report.degraded_roles == [role],
        MayMiss::Any => true,
    };
    if !report.degraded_roles.is_empty() && !accepted {
        return Err(EngineError::Unsupported(format!(
            "the array is degraded (roles {:?} missing): rebuild it before {what}",
            report.degraded_roles
        )));
    }
    let infos = array.devices();
    if infos.len() != devices.len() {
        return Err(EngineError::Refused(format!(
            "only {} of the {} devices given belong to the array; give its members and spares only",
            infos.len(),
            devices.len()
        )));
    }
    Ok(infos.iter().filter(|d| d.state == DeviceState::Spare).map(|d| d.dev_number).collect())
}

/// Every device's v1 superblock (byte offset, superblock) and the newest of them, for a
/// change (`what`, for messages) written to each device's own superblock.
fn v1_superblocks(devices: &[Arc<dyn Member>], what: &str) -> Result<(Vec<(u64, Superblock1)>, Superblock1), EngineError> {
    let mut found = Vec::with_capacity(devices.len());
    for dev in devices {
        match crate::scan::probe(dev.as_ref()).best().cloned() {
            Some((loc, Superblock::V1(sb))) => found.push((loc.offset_bytes, sb)),
            _ => return Err(EngineError::Unsupported(format!("{}: {what} need v1 metadata", dev.label()))),
        }
    }
    let newest = found
        .iter()
        .max_by_key(|(_, sb)| sb.events)
        .map(|(_, sb)| sb.clone())
        .ok_or_else(|| EngineError::Refused("no devices given".into()))?;
    // Members one event behind read as assembly reads them (a crash while the final
    // superblocks of a reshape, or those of a takeover, went out): a change planned from
    // their own superblocks would record their data where it no longer lies (a RAID0 grow
    // crashed there and taken back to RAID0 came out 0 bytes long).
    if !newest.feature_map.contains(uraid_core::metadata::FeatureMap::RESHAPE_ACTIVE) {
        for ((_, own), dev) in found.iter_mut().zip(devices) {
            if own.set_uuid == newest.set_uuid && own.events + 1 == newest.events {
                if let Some(settled) = crate::array::settled_behind(&newest, own, dev.size_bytes() / SECTOR_BYTES) {
                    *own = settled;
                }
            }
        }
    }
    Ok((found, newest))
}
