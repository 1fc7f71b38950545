//! md reshapes. Today: reading an array md left in the middle of one ([`ReshapeView`]).
//! Starting and continuing a reshape (issue 13) will live here too.

mod view;

pub use view::ReshapeView;
