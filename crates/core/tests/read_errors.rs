//! Properties of md's read-error count (`core::state::ReadErrorCount`) against a plain model:
//! the count is what halving per whole hour and adding one gives, and the member is failed
//! exactly when that passes the limit.

use proptest::prelude::*;
use uraid_core::state::{ReadErrorCount, ReadErrorVerdict};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn matches_the_halving_model(gaps in prop::collection::vec(0u64..20_000, 1..60), limit in 0u32..30) {
        let mut c = ReadErrorCount::default();
        let (mut now, mut model) = (1_000_000u64, 0u64);
        for (i, gap) in gaps.iter().enumerate() {
            now += gap;
            if i > 0 {
                model >>= gap / 3600;
            }
            model += 1;
            let verdict = c.record(now, limit);
            prop_assert_eq!(u64::from(c.count()), model);
            prop_assert_eq!(verdict == ReadErrorVerdict::Fail, model > u64::from(limit));
        }
    }

    #[test]
    fn errors_spread_over_hours_never_fail_a_member(n in 1usize..500, limit in 2u32..30) {
        // One error every hour: the count halves before each new one, so it stays at 1..2.
        let mut c = ReadErrorCount::default();
        for i in 0..n {
            prop_assert_eq!(c.record(i as u64 * 3600, limit), ReadErrorVerdict::Rewrite);
        }
    }
}
