//! Geometry checked on arrays made by Linux md (the corpus in `shared/md-corpus`).
//!
//! Every 4 KiB array block holds the text `ARRAY <name> LBA <byte offset> ` repeated,
//! so reading a block where the geometry says it lives shows at once whether the
//! mapping is md's. Parity is checked too: P is the xor of the data chunks and Q is
//! Σ 2^k·D over GF(2^8)/0x11D with md's exponents, and data that only exists on failed
//! members is rebuilt from P and Q.
//!
//! The corpus is found via `URAID_MD_CORPUS` (default: `../../../shared/md-corpus` from
//! this crate). Members are decompressed with the `zstd` binary into a temporary
//! directory. Without a corpus the test says so and passes, so a bare checkout builds.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use uraid_core::geometry::{ArraySpec, Geometry, Level, Placement, RoleKind, SECTOR_BYTES};

const BLOCK_BYTES: u64 = 4096;

/// The bytes md's array holds at `offset..offset + len` in corpus array `name`.
fn expected_bytes(name: &str, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    while out.len() < len {
        let block = at / BLOCK_BYTES;
        let text = format!("ARRAY {name} LBA {} ", block * BLOCK_BYTES);
        let text = text.as_bytes();
        let block_end = (block + 1) * BLOCK_BYTES;
        while at < block_end && out.len() < len {
            out.push(text[((at % BLOCK_BYTES) as usize) % text.len()]);
            at += 1;
        }
    }
    out
}

/// GF(2^8) with md's polynomial 0x11D, by the book (no tables to get wrong).
fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut product = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            product ^= a;
        }
        let carry = a & 0x80 != 0;
        a <<= 1;
        if carry {
            a ^= 0x1d;
        }
        b >>= 1;
    }
    product
}

fn gf_pow2(exponent: u8) -> u8 {
    (0..exponent).fold(1u8, |acc, _| gf_mul(acc, 2))
}

fn gf_inv(a: u8) -> u8 {
    (1..=255u8).find(|&b| gf_mul(a, b) == 1).expect("nonzero has an inverse")
}

struct Member {
    image: Vec<u8>,
    data_offset_sectors: u64,
    /// Stale members (failed before the final content was written) are not read.
    usable: bool,
}

struct CorpusArray {
    name: String,
    geometry: Geometry,
    /// Indexed by role; `None` when no image carries the role.
    members: Vec<Option<Member>>,
}

impl CorpusArray {
    fn read(&self, role: usize, member_sector: u64, len: usize) -> Option<&[u8]> {
        let member = self.members.get(role)?.as_ref().filter(|m| m.usable)?;
        let start = ((member.data_offset_sectors + member_sector) * SECTOR_BYTES) as usize;
        member.image.get(start..start + len)
    }
}

fn level_of(name: &str) -> Level {
    name.parse().unwrap_or_else(|e| panic!("{e}"))
}

/// mdadm prints "Used Dev Size" in sectors for v1.x and in KiB for 0.90.
fn used_dev_sectors(examine: &Value) -> Option<u64> {
    let text = examine.get("used_dev_size")?.as_str()?;
    let number: u64 = text.split_whitespace().next()?.parse().ok()?;
    let sectors = if text.contains("sectors") { number } else { number * 2 };
    (sectors > 0).then_some(sectors)
}

fn load(dir: &Path, scratch: &Path) -> CorpusArray {
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest")).expect("manifest json");
    let name = manifest["name"].as_str().expect("name").to_string();
    let level = level_of(manifest["level"].as_str().expect("level"));
    let layout: i64 = manifest["layout_sysfs"].as_str().unwrap_or("0").parse().expect("layout");
    let chunk_sectors = manifest["chunk_size_bytes"].as_u64().unwrap_or(0) / SECTOR_BYTES;
    let raid_disks = manifest["raid_devices"].as_u64().expect("raid_devices") as usize;

    let mut sizes = vec![0u64; raid_disks];
    let mut members: Vec<Option<Member>> = (0..raid_disks).map(|_| None).collect();
    for entry in manifest["members"].as_array().expect("members") {
        let examine = &entry["examine"];
        let Some(role) = examine["role"].as_u64().map(|r| r as usize) else {
            continue; // spare
        };
        let image_name = entry["image"].as_str().expect("image");
        let out = scratch.join(image_name.trim_end_matches(".zst"));
        let status = Command::new("zstd").args(["-d", "-q", "-f", "-o"]).arg(&out).arg(dir.join(image_name)).status().expect("run zstd");
        assert!(status.success(), "zstd failed on {image_name}");
        let image = std::fs::read(&out).expect("read member");
        let _ = std::fs::remove_file(&out);
        let avail = examine["avail_dev_size_sectors"].as_u64();
        let sysfs = entry["sysfs_size_kib"].as_str().and_then(|s| s.parse::<u64>().ok()).map(|k| k * 2);
        sizes[role] = match level {
            // linear and raid0 use each member's own data size.
            Level::Linear | Level::Raid0 => avail.or(sysfs).expect("member size"),
            _ => used_dev_sectors(examine).or(avail).or(sysfs).expect("member size"),
        };
        // Stale members are described by a "condition" and were not assembled.
        let usable = entry.get("condition").is_none() && entry["in_assembled_array"] != Value::Bool(false);
        members[role] = Some(Member { image, data_offset_sectors: examine["data_offset_sectors"].as_u64().unwrap_or(0), usable });
    }
    let spec = ArraySpec { level, layout: layout as u32, chunk_sectors: chunk_sectors as u32, raid_disks, member_sectors: sizes };
    let geometry = Geometry::new(&spec).unwrap_or_else(|e| panic!("{name}: {e}"));
    let array_bytes = manifest["array_size_bytes"].as_u64().expect("array size");
    assert_eq!(geometry.array_sectors() * SECTOR_BYTES, array_bytes, "{name}: array size differs from md's");
    CorpusArray { name, geometry, members }
}

/// The bytes of data block `data_index` of `stripe` at `member_sector..+len`, read
/// directly or, when its member is unusable, rebuilt from the rest of the stripe.
fn stripe_data(array: &CorpusArray, stripe: u64, data_index: usize, member_sector: u64, len: usize) -> Vec<u8> {
    let parity = array.geometry.as_parity().expect("parity level");
    let roles = parity.stripe_roles(stripe);
    if let Some(bytes) = array.read(roles.data[data_index], member_sector, len) {
        return bytes.to_vec();
    }
    let missing: Vec<usize> = (0..roles.data.len()).filter(|&i| array.read(roles.data[i], member_sector, len).is_none()).collect();
    let p = array.read(roles.p, member_sector, len);
    let q = roles.q.and_then(|q| array.read(q, member_sector, len));
    // P xor the present data blocks leaves the xor of the missing ones.
    let xor_rest = |p: &[u8]| -> Vec<u8> {
        let mut acc = p.to_vec();
        for (i, &role) in roles.data.iter().enumerate() {
            if !missing.contains(&i) {
                let d = array.read(role, member_sector, len).expect("present");
                acc.iter_mut().zip(d).for_each(|(a, b)| *a ^= b);
            }
        }
        acc
    };
    // Q minus the present data blocks' terms leaves the missing ones' terms.
    let q_rest = |q: &[u8]| -> Vec<u8> {
        let mut acc = q.to_vec();
        for (i, &role) in roles.data.iter().enumerate() {
            if !missing.contains(&i) {
                let d = array.read(role, member_sector, len).expect("present");
                let g = gf_pow2(roles.q_exponents[i]);
                acc.iter_mut().zip(d).for_each(|(a, b)| *a ^= gf_mul(*b, g));
            }
        }
        acc
    };
    match (missing.as_slice(), p, q) {
        ([_], Some(p), _) => xor_rest(p),
        ([only], None, Some(q)) => {
            let inverse = gf_inv(gf_pow2(roles.q_exponents[*only]));
            q_rest(q).into_iter().map(|b| gf_mul(b, inverse)).collect()
        }
        ([x, y], Some(p), Some(q)) => {
            // Dx + Dy = P', gx·Dx + gy·Dy = Q'  =>  Dx = (Q' + gy·P') / (gx + gy).
            let (gx, gy) = (gf_pow2(roles.q_exponents[*x]), gf_pow2(roles.q_exponents[*y]));
            let p_rest = xor_rest(p);
            let q_rest = q_rest(q);
            let inverse = gf_inv(gx ^ gy);
            let dx: Vec<u8> = p_rest.iter().zip(&q_rest).map(|(&pp, &qq)| gf_mul(qq ^ gf_mul(gy, pp), inverse)).collect();
            if data_index == *x {
                dx
            } else {
                dx.iter().zip(&p_rest).map(|(a, b)| a ^ b).collect()
            }
        }
        other => panic!("{}: stripe {stripe} cannot be rebuilt ({:?} missing)", array.name, other.0),
    }
}

/// Sampled array blocks hold md's text at the member places the geometry names.
fn check_blocks(array: &CorpusArray) -> usize {
    let blocks = array.geometry.array_sectors() * SECTOR_BYTES / BLOCK_BYTES;
    let sectors_per_block = BLOCK_BYTES / SECTOR_BYTES;
    let mut sample: Vec<u64> = (0..blocks).step_by(97).collect();
    sample.extend([1, blocks - 1]);
    let mut checked = 0;
    for block in sample {
        for piece in array.geometry.split(block * sectors_per_block, sectors_per_block).expect("split") {
            let len = (piece.sectors * SECTOR_BYTES) as usize;
            let want = expected_bytes(&array.name, piece.array_sector * SECTOR_BYTES, len);
            let what = format!("{} block {block} piece {:?}", array.name, piece.placement);
            match &piece.placement {
                Placement::Single(at) => {
                    let got = array.read(at.role, at.sector, len).expect("member readable");
                    assert!(got == want.as_slice(), "{what}: found {:?}", String::from_utf8_lossy(&got[..40]));
                }
                Placement::Mirrored(copies) => {
                    let mut read_any = false;
                    for at in copies {
                        if let Some(got) = array.read(at.role, at.sector, len) {
                            assert!(got == want.as_slice(), "{what} copy {at:?}: found {:?}", String::from_utf8_lossy(&got[..40]));
                            read_any = true;
                        }
                    }
                    assert!(read_any, "{what}: no usable copy");
                }
                Placement::Striped(loc) => {
                    let got = stripe_data(array, loc.stripe, loc.data_index, loc.member_sector, len);
                    assert!(got == want, "{what}: found {:?}", String::from_utf8_lossy(&got[..40]));
                }
            }
            checked += 1;
        }
    }
    checked
}

/// For sampled stripes with every member usable: P and Q are what md computes.
fn check_parity(array: &CorpusArray) -> usize {
    let Some(parity) = array.geometry.as_parity() else {
        return 0;
    };
    let chunk_bytes = (parity.chunk_sectors() * SECTOR_BYTES) as usize;
    let mut stripes: Vec<u64> = (0..parity.stripes()).step_by(5).collect();
    stripes.push(parity.stripes() - 1);
    let mut checked = 0;
    for stripe in stripes {
        let roles = parity.stripe_roles(stripe);
        let at = stripe * parity.chunk_sectors();
        let data: Option<Vec<&[u8]>> = roles.data.iter().map(|&r| array.read(r, at, chunk_bytes)).collect();
        let (Some(data), Some(p)) = (data, array.read(roles.p, at, chunk_bytes)) else {
            continue; // a stale member: parity there cannot be checked directly
        };
        for (role, expect) in roles.data.iter().enumerate() {
            assert_eq!(parity.kind_of(stripe, *expect), Some(RoleKind::Data(role)));
        }
        let mut xor = vec![0u8; chunk_bytes];
        for d in &data {
            xor.iter_mut().zip(*d).for_each(|(a, b)| *a ^= b);
        }
        assert!(xor == p, "{}: P of stripe {stripe} is not the xor of its data", array.name);
        if let Some(q_role) = roles.q {
            let Some(q) = array.read(q_role, at, chunk_bytes) else {
                continue;
            };
            let mut syndrome = vec![0u8; chunk_bytes];
            for (d, &exponent) in data.iter().zip(&roles.q_exponents) {
                let g = gf_pow2(exponent);
                syndrome.iter_mut().zip(*d).for_each(|(a, b)| *a ^= gf_mul(*b, g));
            }
            assert!(syndrome == q, "{}: Q of stripe {stripe} differs from md's", array.name);
        }
        checked += 1;
    }
    checked
}

#[test]
fn corpus_arrays_map_like_md() {
    let Some(corpus) = uraid_testkit::require_shared(&uraid_testkit::MD_CORPUS, "geometry_corpus::corpus_arrays_map_like_md") else {
        return;
    };
    let index: Value = serde_json::from_slice(&std::fs::read(corpus.join("index.json")).expect("index")).expect("index json");
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut seen = 0;
    for entry in index["arrays"].as_array().expect("arrays") {
        let dir = corpus.join(entry["dir"].as_str().expect("dir"));
        let array = load(&dir, scratch.path());
        let blocks = check_blocks(&array);
        let stripes = check_parity(&array);
        eprintln!("{}: {} pieces and {} parity stripes match md", array.name, blocks, stripes);
        assert!(blocks > 0);
        if matches!(array.geometry.level(), Level::Raid4 | Level::Raid5 | Level::Raid6) && array.members.iter().flatten().all(|m| m.usable)
        {
            assert!(stripes > 0, "{}: no parity stripe checked", array.name);
        }
        seen += 1;
    }
    assert!(seen >= 10, "expected the whole corpus, saw {seen} arrays");
}
