pub mod bench;
pub mod examine;
pub mod read;
