//! md reshapes: an array moved from one shape to another (more or fewer members, another
//! chunk, layout or level) while it stays in use, with md's on-disk protocol
//! ([`ReshapingArray`]).

mod overlay;
mod reshaping;

pub use reshaping::{ReshapeStep, ReshapingArray, DEFAULT_WINDOW_BYTES};
