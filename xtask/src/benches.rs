//! The benchmark targets that `cargo xtask bench` runs ([`BENCHES`]), in the order their
//! sections appear in `docs/benchmarks.md`, each with the paragraph that says what it
//! measures. Apart from the run (`bench.rs`) because the renderer reads the table too,
//! and the run uses the renderer: both depend on this file, which depends on nothing.

/// The section of the counts (`counts.rs`), which xtask counts itself; its `BENCH` id.
pub(crate) const COUNTS: &str = "xtask/counts";

/// A benchmark target that `cargo xtask bench` runs, in this order.
pub(crate) struct Bench {
    /// The cargo package that holds the target, named as its folder, as the benchmark's
    /// records name it (`twice/python`).
    pub(crate) package: &'static str,
    pub(crate) target: &'static str,
    /// One paragraph under the section heading: what is measured.
    pub(crate) about: &'static str,
}

impl Bench {
    /// The value of `bench` in its records.
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.package, self.target)
    }
}

pub(crate) const BENCHES: &[Bench] = &[
    // Counted by xtask itself (`counts.rs`), not by a `cargo bench` target.
    Bench {
        package: "xtask",
        target: "counts",
        about: "Costs counted rather than timed, so that they do not move with the machine's neighbours: \
                instructions under Callgrind (user space, the counted process only) and fsync calls under \
                strace, each per unit of work as the difference of a short and a long run over the \
                difference in work, and each taken twice (the spread is how far the two runs differed). \
                The targets are judged on these counts. `cargo xtask bench --counts` counts alone and \
                rewrites this section; `cargo xtask bench --compare BASE` counts another commit beside \
                this one.",
    },
    // Timed by xtask itself (`inner_loop.rs`), not by a `cargo bench` target.
    Bench {
        package: "xtask",
        target: "build",
        about: "The inner loop: `cargo build` of the CLI in the dev profile, as a developer runs it in this \
                checkout, right after a build (nothing changed: nothing may compile, so a stamp or a build \
                script that reruns for nothing is seen here), and after a change to one source file low in \
                the crate graph (the checker, which every runner, serve and CLI build depends on) and at its \
                top (the CLI). Each figure is the median of 5 builds. `cargo xtask bench --only xtask/build` \
                measures this section alone.",
    },
    // Read from a saved `.ci/run` output (`ci_log.rs`), not measured by a benchmark run.
    Bench {
        package: "xtask",
        target: "ci",
        about: "`.ci/run` on a fresh clone with an empty target directory, as CI runs it (`CI=true`, no input), \
                by stage as its `==> STAGE: N s` lines print them: formatting, clippy, the whole suite \
                (`cargo xtask test`, which prints each of its own steps' times too) and the engines' short \
                run. A full benchmark run does not repeat it; `cargo xtask bench --ci-log FILE` reads a saved \
                output into this section. Target: the whole run in 15 minutes on this 2-core machine.",
    },
    // Read from a saved `cargo xtask engines` output (`engines_log.rs`), not measured by a
    // benchmark run.
    Bench {
        package: "xtask",
        target: "engines",
        about: "A full `cargo xtask engines` on this machine: per engine, its tests of both routes (the \
                adapter's whole-catalog runs of the careful and the idiomatic app, 117 scenarios each, and \
                the hand-picked `twice serve` tests), one engine after another, and the venvs' preparation \
                (already made: a check). A full benchmark run does not repeat it; `cargo xtask bench \
                --engines-log FILE` reads a saved output into this section. Target: all five engines in 25 \
                minutes.",
    },
    Bench {
        package: "fake-services",
        target: "throughput",
        about: "Requests per second that the fakes serve over loopback HTTP with keep-alive: the payments \
                fake creating a refund per request, with and without fault rules armed, next to a stateful \
                refund stub built with the `wiremock` crate (what a user would write instead: a `Respond` \
                impl holding the same state) and bare hyper answering a fixed body on the same transport \
                (the ceiling); the files fake storing an object per S3 PUT; the chain fake taking a \
                pre-signed transfer per `eth_sendRawTransaction` (decoding and sender recovery included). \
                Target: within 1.5x of bare hyper.",
    },
    Bench {
        package: "executor",
        target: "intents",
        about: "Intents per second through the reference executor library (`Executor::propose`, each a \
                durable commit, then `drain` until the payments fake on loopback confirms every refund, \
                no faults), with `Durability::Full` and `Durability::Normal`, next to the raw rate of \
                single-row SQLite commits (WAL, synchronous FULL and NORMAL) on the same disk in the \
                same run. Target: within 2x of the raw commit rate.",
    },
    Bench {
        package: "twice",
        target: "run",
        about: "How fast `twice run` goes. Sim: generated cases per second against the reference executor \
                in process (`run::run_cases`, each case on its own paused tokio runtime with the fakes and a \
                real SQLite log, then checked), on 2 threads and on 1, and the virtual time those cases span \
                over the wall time they took. Live: the whole catalog against the release `twice-executor` \
                binary (real subprocesses, loopback HTTP, real signals), in total and per scenario, and the \
                same catalog in sim: cases per second in both and their ratio. Reports: \
                10,000 generated cases run in sim, then all four report files rendered and written from \
                their results. Targets: thousands of cases/s (at least 2,000) and 1,000x in sim on this 2-core machine; \
                the live catalog in under 60 s; the reports in under 10% of the sim time.",
    },
    Bench {
        package: "twice",
        target: "scaling",
        about: "How the sim's cost grows. With intents per scenario: one scenario of 1, 10, 100 and 1,000 \
                refunds (a tenth of the sends lose their reply after committing, so the share reconciled is \
                the same at every size), its wall time on one thread and the peak memory of a process that \
                runs it. With the size of the scenario set a run covers: 100, 1,000 and 10,000 generated \
                cases on 2 threads (the catalog has 39), cases per \
                second and the peak memory of a process that runs them and keeps their results. The \
                complexity is stated as the exponent b in cost ~ size^b.",
    },
    Bench {
        package: "twice",
        target: "serve",
        about: "`twice serve` as a test suite meets it: the release binary from spawn to ready (its URLs \
                file written, every fake and the control endpoint listening), and on a running serve one \
                scenario set up and one verdict asked for (`POST /__twice/scenario`, then `POST \
                /__twice/check`) over loopback, and a reset. Target: a start well under a second, so that a \
                serve per test is affordable.",
    },
    Bench {
        package: "twice-tests",
        target: "search",
        about: "Search power: for each mutant executor of the failure-mode list (one deliberate bug each, \
                `docs/failure-modes.md`), how many generated cases it takes to reach the first violation, \
                median over 20 seeds, for twice's generator and for a protocol-unaware baseline built into \
                the benchmark that does what a TCP fault proxy can: the same intents against services on \
                their default contracts, each request independently delayed past the timeout or reset with a \
                fixed probability; no semantic faults, no crashes or second workers, no clock control. Both \
                run in sim, against the same executors, checked by the same checker.",
    },
    Bench {
        package: "twice",
        target: "python",
        about: "Live runs against the Python executor of `examples/executors/python` (the conformance \
                kit's example: stripe-python, requests, boto3 and web3.py against the fakes, a SQLite intent \
                log, a Python process per worker), as a team meets them: the catalog and 20 generated cases at \
                `twice run`'s default of 8 scenarios at a time (target: at most 30 s on two cores); the same at \
                2, 8 and 16 at a time beside the `constant-fencing-token` variant on the stale-worker \
                scenarios, and whether every verdict held under that load; a run whose executor has a bug \
                (`--bug memory-only`) that generated cases expose, failures shrunk within the default 60 s \
                budget (target: at most 120 s from start to the last shrink); and the whole catalog alone on 2 \
                at a time, in total and per scenario (target: under 60 s).",
    },
];

#[cfg(test)]
mod tests {
    use super::BENCHES;

    /// Every target `cargo xtask bench` runs is a bench target of the package it names: a
    /// renamed package or target fails here, not an hour into a run.
    #[test]
    fn every_benchmark_is_a_bench_target_of_its_package() {
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo metadata runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let metadata: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
        let packages = metadata["packages"].as_array().expect("a package list");
        for bench in BENCHES.iter().filter(|b| b.package != "xtask") {
            let package = packages
                .iter()
                .find(|p| p["name"] == bench.package)
                .unwrap_or_else(|| panic!("no package {} for {}", bench.package, bench.id()));
            let found = package["targets"].as_array().expect("targets").iter().any(|t| {
                t["name"] == bench.target
                    && t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "bench"))
            });
            assert!(found, "package {} has no bench target {}", bench.package, bench.target);
        }
    }
}
