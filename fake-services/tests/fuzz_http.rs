//! The fuzz of `cargo xtask fuzz-http`, short: 2,000 generated and mutated requests per fake
//! over real HTTP, with fault rules armed in every other phase. No panic, no 5xx that no rule
//! explains, no hang, no connection lost where no rule drops one, and memory flat.
//!
//! A test binary of its own: memory is the process's RSS, and the tests of `it` run side by
//! side in one process (the body-limit tests alone send 24 MiB bodies), which made the RSS
//! check fail when one of them ran beside this one.

#[path = "../examples/fuzz_http/driver.rs"]
mod driver;
#[path = "../examples/fuzz_http/traffic.rs"]
mod traffic;

#[test]
fn fuzzed_requests_over_http_never_panic_hang_nor_answer_unexplained_5xx() {
    let mut config = driver::Config::new(2_000, 7);
    config.phases = 4;
    let report = driver::run(&config).expect("the fuzz runs");
    report.print();
    assert_eq!(report.panics, 0, "a fake panicked");
    assert_eq!(report.unexplained_5xx, 0);
    assert!(report.failures.is_empty(), "{} failures, listed above", report.failures.len());
    assert!(report.passed(), "memory grew: {:?}", report.rss_samples());
    let answered: u64 = report.services.iter().map(|s| s.requests).sum();
    assert_eq!(answered, 5 * 2_000);
}
