//! Array geometry: md layouts mapping array sectors to member sectors.
