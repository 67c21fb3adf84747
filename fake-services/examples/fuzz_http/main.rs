//! `cargo run --release -p fake-services --example fuzz_http -- [--requests N] [--seed S]
//! [--service NAME] [--only INDEX]` (what `cargo xtask fuzz-http` runs): generated and mutated
//! requests at every fake over real HTTP, checked for panics, unexplained 5xx, hangs and
//! memory growth. Exit status 1 on any failure, each printed with the seed and index that
//! reproduce it. `driver.rs` is the run and its checks, `traffic.rs` the requests; the test
//! `fuzz_http` in `tests/it` runs a short version of the same code.

#[path = "driver.rs"]
mod driver;
#[path = "traffic.rs"]
mod traffic;

fn main() {
    match parse(std::env::args().skip(1).collect()) {
        Ok(config) => match driver::run(&config) {
            Ok(report) => {
                report.print();
                if config.only.is_none() && !report.passed() {
                    std::process::exit(1);
                }
            }
            Err(e) => {
                eprintln!("fuzz_http: {e}");
                std::process::exit(1);
            }
        },
        Err(e) => {
            eprintln!(
                "fuzz_http: {e}\nusage: fuzz_http [--requests N] [--seed S] [--service NAME] [--only INDEX] [--concurrency C]"
            );
            std::process::exit(2);
        }
    }
}

fn parse(args: Vec<String>) -> Result<driver::Config, String> {
    let mut config = driver::Config::new(1_000_000, 1);
    let mut requests = None;
    let mut it = args.into_iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{v}: {e}"));
        match flag.as_str() {
            "--requests" => requests = Some(number(value()?)?),
            "--seed" => config.seed = number(value()?)?,
            "--only" => config.only = Some(number(value()?)?),
            "--concurrency" => config.concurrency = number(value()?)? as usize,
            "--service" => {
                let name = value()?;
                let known = traffic::SERVICES.iter().find(|s| **s == name).ok_or_else(|| {
                    format!("unknown service {name}; one of {}", traffic::SERVICES.join(", "))
                })?;
                config.services = vec![*known];
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if let Some(n) = requests {
        let keep = (config.seed, config.services.clone(), config.only, config.concurrency);
        config = driver::Config::new(n, keep.0);
        (config.services, config.only, config.concurrency) = (keep.1, keep.2, keep.3);
    }
    Ok(config)
}
