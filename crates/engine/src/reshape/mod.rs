//! md reshapes: an array moved from one shape to another (more or fewer members, another
//! chunk, layout or level) while it stays in use, with md's on-disk protocol
//! ([`ReshapingArray`]).

mod overlay;
mod reshaping;
mod takeover;

pub use reshaping::{ReshapeStep, ReshapingArray, DEFAULT_WINDOW_BYTES};
pub use takeover::take_over;

use crate::array::{Array, ArrayOptions, DeviceState, EngineError};
use crate::member::Member;
use std::sync::Arc;

/// Assembles the stopped array on `devices` read-only and checks that its shape may change
/// as md requires (clean, not degraded, every device given part of it); returns its spares
/// by `dev_number`. `what`: the change, for messages.
fn spares_of_a_changeable_array(devices: &[Arc<dyn Member>], opts: &ArrayOptions, what: &str) -> Result<Vec<u32>, EngineError> {
    spares_of_a_changeable_array_missing(devices, opts, what, None)
}

/// [`spares_of_a_changeable_array`], also accepting an array whose only missing role is
/// `may_miss` (RAID4/5 -> RAID0: md wants the parity member gone).
fn spares_of_a_changeable_array_missing(
    devices: &[Arc<dyn Member>],
    opts: &ArrayOptions,
    what: &str,
    may_miss: Option<u32>,
) -> Result<Vec<u32>, EngineError> {
    let mut assemble = opts.assemble;
    assemble.run |= may_miss.is_some();
    let (array, report) = Array::assemble(devices.to_vec(), &ArrayOptions { writable: false, assemble, ..*opts })?;
    if report.needs_resync {
        return Err(EngineError::Refused(format!(
            "the array was not shut down cleanly: let its resync finish (uraid serve) before {what}"
        )));
    }
    if !report.degraded_roles.is_empty() && (may_miss.is_none() || report.degraded_roles != may_miss.into_iter().collect::<Vec<_>>()) {
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
