//! Pure md logic: on-disk metadata codecs, layout geometry and assembly decisions.
//!
//! Nothing here performs I/O: callers hand in bytes and get back decoded structures or
//! decisions, so every function can be tested exhaustively and fuzzed.
#![forbid(unsafe_code)]

pub mod assemble;
pub mod geometry;
pub mod metadata;
pub mod plan;
pub mod reshape_order;
pub mod reshape_window;
pub mod state;
