//! Writes the superblocks (and bitmap) of a planned `create` onto zeroed sparse image files,
//! so real mdadm can assemble them (`/work/shared/mdvm/verify-images DIR`).
//!
//! Usage: `create_images DIR LEVEL DEVICES SIZE_MIB [--bitmap] [--metadata 1.2|1.1|1.0|0.90]`
//! The array is created `--assume-clean`: all-zero members are consistent for every level.

use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

use uraid_core::geometry::Level;
use uraid_core::metadata::create::{plan_create, BitmapRequest, CreateRequest, InitialSync, NewDevice};
use uraid_core::metadata::{MdTime, MetadataVersion};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        return Err("usage: create_images DIR LEVEL DEVICES SIZE_MIB [--bitmap] [--metadata V]".into());
    }
    let dir = PathBuf::from(&args[0]);
    let level: Level = args[1].parse()?;
    let devices: usize = args[2].parse()?;
    let size_bytes: u64 = args[3].parse::<u64>()? << 20;
    let bitmap = args.iter().any(|a| a == "--bitmap");
    let metadata = match args.iter().position(|a| a == "--metadata").and_then(|i| args.get(i + 1)) {
        None => MetadataVersion::V1_2,
        Some(v) if v == "1.2" => MetadataVersion::V1_2,
        Some(v) if v == "1.1" => MetadataVersion::V1_1,
        Some(v) if v == "1.0" => MetadataVersion::V1_0,
        Some(v) if v == "0.90" => MetadataVersion::V0_90,
        Some(v) => return Err(format!("unknown metadata {v}").into()),
    };

    // Fixed "random" values keep the images reproducible.
    let members = (0..devices).map(|i| Some(NewDevice { size_bytes, device_uuid: [0x10 + i as u8; 16] })).collect();
    let mut request =
        CreateRequest::new(level, format!("uraid-{}", args[1]), members, *b"uraid-create-tst", MdTime::from_parts(1_750_000_000, 0));
    request.metadata = metadata;
    request.initial_sync = InitialSync::AssumeClean;
    if bitmap {
        request.bitmap = Some(BitmapRequest::default());
    }
    let plan = plan_create(&request)?;

    std::fs::create_dir_all(&dir)?;
    for (index, device) in plan.devices.iter().enumerate() {
        let path = dir.join(format!("disk{index}.img"));
        let mut file = OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
        file.set_len(size_bytes)?;
        file.seek(SeekFrom::Start(device.superblock_offset_bytes))?;
        file.write_all(&device.superblock_bytes())?;
        if let Some(bitmap) = &device.bitmap {
            file.seek(SeekFrom::Start(bitmap.offset_bytes))?;
            file.write_all(&bitmap.encode())?;
        }
        file.sync_all()?;
    }
    println!(
        "{} {} members, array {} sectors, data offset {} sectors -> {}",
        plan.level,
        plan.devices.len(),
        plan.array_size_sectors,
        plan.devices.first().map_or(0, |d| d.data_offset_sectors),
        dir.display()
    );
    Ok(())
}
