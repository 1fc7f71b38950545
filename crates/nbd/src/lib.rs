//! An NBD (Network Block Device) server for uraid arrays, written from the NBD project's
//! protocol description (`doc/proto.md`): fixed-newstyle handshake with NBD_OPT_GO/INFO/
//! LIST/EXPORT_NAME/ABORT, simple replies, READ/WRITE(+FUA)/FLUSH/TRIM/WRITE_ZEROES/DISC,
//! several requests per connection in parallel and several connections per export
//! (NBD_FLAG_CAN_MULTI_CONN: `Array::flush` covers every connection's writes).
//!
//! ```no_run
//! # use std::sync::{Arc, atomic::AtomicBool};
//! # fn demo(array: Arc<uraid_engine::Array>) -> std::io::Result<()> {
//! let listener = uraid_nbd::bind("127.0.0.1:10809")?; // or "unix:/run/uraid.sock"
//! let stop = Arc::new(AtomicBool::new(false));
//! uraid_nbd::serve(listener, vec![uraid_nbd::Export::new(array)], stop)?; // until stop
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod client;
pub mod protocol;
pub mod server;
mod transport;

pub use client::{ClientOptions, NbdMember, NbdUri};
pub use server::{serve, Export, NbdServer, ServerConfig};
pub use transport::{bind, Listener, DEFAULT_ADDR, DEFAULT_PORT};
