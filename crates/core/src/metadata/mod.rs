//! md on-disk metadata: superblocks 0.90 and 1.x, write-intent bitmap.
