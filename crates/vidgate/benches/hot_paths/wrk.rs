//! Driving `wrk` (a Debian package: `apt-get install wrk`) and reading its
//! report.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// What one `wrk` run measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub requests_per_second: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// Answers outside 2xx/3xx plus socket errors: a run with any is not a
    /// measurement of the path it meant to load.
    pub failures: u64,
}

/// How every run loads the server: the issue's `wrk -t2 -c32`.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub threads: u32,
    pub connections: u32,
    pub seconds: u64,
}

/// Exits with a clear message when wrk is not installed.
pub fn require_wrk() {
    let found = Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok_and(|output| !output.stdout.is_empty() || !output.stderr.is_empty());
    if !found {
        eprintln!(
            "this benchmark drives wrk, which is not installed: `apt-get install wrk` (Debian/Ubuntu)"
        );
        std::process::exit(2);
    }
}

/// Loads `url` with GET requests carrying `headers`, or with what `script`
/// (a wrk Lua file) sends.
pub fn run(load: Load, url: &str, headers: &[String], script: Option<&Path>) -> Measured {
    let mut command = Command::new("wrk");
    command
        .arg(format!("-t{}", load.threads))
        .arg(format!("-c{}", load.connections))
        .arg(format!("-d{}s", load.seconds))
        .arg("--latency");
    for header in headers {
        command.arg("-H").arg(header);
    }
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let output = command.arg(url).output().expect("wrk runs");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "wrk failed: {report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse(&report).unwrap_or_else(|| panic!("unexpected wrk report:\n{report}"))
}

/// Several runs at once against nodes that share the work: their
/// throughputs added, their median the mean of theirs, their p99 the worst.
pub fn together(runs: impl Iterator<Item = Measured>) -> Measured {
    let runs: Vec<Measured> = runs.collect();
    assert!(!runs.is_empty(), "no runs together");
    Measured {
        requests_per_second: runs.iter().map(|run| run.requests_per_second).sum(),
        p50: runs.iter().map(|run| run.p50).sum::<Duration>() / runs.len() as u32,
        p99: runs.iter().map(|run| run.p99).max().expect("not empty"),
        failures: runs.iter().map(|run| run.failures).sum(),
    }
}

/// The mean of several runs of one path: throughput and percentiles
/// averaged, failures summed (any failure still marks the figure invalid).
pub fn mean(runs: impl Iterator<Item = Measured>) -> Measured {
    let runs: Vec<Measured> = runs.collect();
    assert!(!runs.is_empty(), "a mean of no runs");
    let count = runs.len() as u32;
    Measured {
        requests_per_second: runs.iter().map(|run| run.requests_per_second).sum::<f64>()
            / f64::from(count),
        p50: runs.iter().map(|run| run.p50).sum::<Duration>() / count,
        p99: runs.iter().map(|run| run.p99).sum::<Duration>() / count,
        failures: runs.iter().map(|run| run.failures).sum(),
    }
}

fn parse(report: &str) -> Option<Measured> {
    let mut requests_per_second = None;
    let mut p50 = None;
    let mut p99 = None;
    let mut failures = 0;
    for line in report.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(figure)) => requests_per_second = figure.parse().ok(),
            (Some("50%"), Some(figure)) => p50 = parse_duration(figure),
            (Some("99%"), Some(figure)) => p99 = parse_duration(figure),
            _ => {}
        }
        if let Some(count) = line.strip_prefix("Non-2xx or 3xx responses:") {
            failures += count.trim().parse::<u64>().ok()?;
        }
        if let Some(errors) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            failures += errors
                .split(',')
                .filter_map(|part| part.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
    }
    Some(Measured {
        requests_per_second: requests_per_second?,
        p50: p50?,
        p99: p99?,
        failures,
    })
}

/// wrk prints `812.00us`, `4.30ms` or `1.02s`.
fn parse_duration(text: &str) -> Option<Duration> {
    let (number, scale) = if let Some(number) = text.strip_suffix("us") {
        (number, 1e-6)
    } else if let Some(number) = text.strip_suffix("ms") {
        (number, 1e-3)
    } else if let Some(number) = text.strip_suffix('s') {
        (number, 1.0)
    } else {
        return None;
    };
    Some(Duration::from_secs_f64(number.parse::<f64>().ok()? * scale))
}

/// A wrk script that POSTs `body` with a key picked at random from `keys`
/// for every request.
pub fn post_script(
    directory: &Path,
    name: &str,
    keys: &[String],
    body: &str,
) -> std::path::PathBuf {
    let keys: Vec<String> = keys.iter().map(|key| format!("{key:?}")).collect();
    let script = format!(
        "local keys = {{ {} }}\n\
         local body = {body:?}\n\
         request = function()\n  \
           local headers = {{ [\"Authorization\"] = \"Bearer \" .. keys[math.random(#keys)], \
         [\"Content-Type\"] = \"application/json\" }}\n  \
           return wrk.format(\"POST\", nil, headers, body)\n\
         end\n",
        keys.join(", ")
    );
    let path = directory.join(format!("{name}.lua"));
    std::fs::write(&path, script).expect("the wrk script is written");
    path
}
