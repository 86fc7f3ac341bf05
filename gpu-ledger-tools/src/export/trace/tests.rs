//! Iteration ranges as `--iterations` parses them.

use super::*;

#[test]
fn ranges() {
    let r: IterationRange = "2..5".parse().unwrap();
    assert!(!r.contains(1) && r.contains(2) && r.contains(4) && !r.contains(5));
    let r: IterationRange = "2..=5".parse().unwrap();
    assert!(r.contains(5) && !r.contains(6));
    let r: IterationRange = "10..".parse().unwrap();
    assert!(r.contains(u64::MAX) && !r.contains(9));
    let r: IterationRange = "..3".parse().unwrap();
    assert!(r.contains(0) && !r.contains(3));
    let r: IterationRange = "7".parse().unwrap();
    assert!(r.contains(7) && !r.contains(8) && !r.contains(6));
    assert!("..".parse::<IterationRange>().unwrap().is_all());
    assert!("5..2".parse::<IterationRange>().is_err());
    assert!("a..b".parse::<IterationRange>().is_err());
    assert!("".parse::<IterationRange>().is_err());
    assert!("3..=".parse::<IterationRange>().is_err());
    // The last index there is: a range of one, open above.
    let max = u64::MAX;
    for text in [format!("{max}..={max}"), format!("{max}")] {
        let r: IterationRange = text.parse().unwrap();
        assert!(r.contains(max) && !r.contains(max - 1), "{text}");
    }
    assert_eq!(
        "2..5".parse::<IterationRange>().unwrap().to_string(),
        "2..5"
    );
}
