//! What the figures were measured on (date, CPU, cores, memory, kernel, rustc), read from
//! `/proc` and a few commands; anything unreadable is "unknown" rather than an error.

use std::fs;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::output_of;

/// What the figures were measured on.
pub(crate) struct Machine {
    pub(crate) date: String,
    pub(crate) cpu: String,
    pub(crate) cores: String,
    pub(crate) memory: String,
    pub(crate) kernel: String,
    pub(crate) rustc: String,
}

pub(crate) fn machine() -> Machine {
    let unknown = || "unknown".to_string();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, v)| v.trim())
        })
        .map(str::to_string)
        .unwrap_or_else(unknown);
    let listed = cpuinfo.lines().filter(|l| l.starts_with("processor") && l.contains(':')).count();
    let cores = match (listed, std::thread::available_parallelism()) {
        (0, Ok(n)) => n.to_string(),
        (0, Err(_)) => unknown(),
        (n, Ok(usable)) if usable.get() < n => format!("{n} ({usable} usable by this process)"),
        (n, _) => n.to_string(),
    };
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kib / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(unknown);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Machine {
        date: utc_date_time(secs),
        cpu,
        cores,
        memory,
        kernel: output_of("uname", &["-r"]).unwrap_or_else(unknown),
        rustc: output_of("rustc", &["--version"]).unwrap_or_else(unknown),
    }
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch.
fn utc_date_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc_date_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date_time(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_date_time(1_767_225_599), "2025-12-31 23:59 UTC");
    }
}
