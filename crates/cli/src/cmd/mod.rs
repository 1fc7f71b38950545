pub mod bench;
pub mod create;
pub mod examine;
pub mod read;
pub mod write;
