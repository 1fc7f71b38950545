pub mod bench;
pub mod create;
pub mod ctl;
pub mod examine;
pub mod grow;
pub mod read;
pub mod write;
