//! Assembly decision: which found members form which array, and can it run.
