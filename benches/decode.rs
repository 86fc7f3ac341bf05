//! Benchmark placeholder (issue 7 fills it).
fn main() {}
