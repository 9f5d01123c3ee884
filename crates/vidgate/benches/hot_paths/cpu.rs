//! CPU time by process, read from Linux's `/proc`, so that a ratio of two
//! throughputs on this 2-core machine can be explained by where the cores
//! went: for each request (or transaction), how much CPU the server, the
//! database and the load generator each used (issue 55).
//!
//! The database is every process named `postgres`, plus what its
//! postmaster reaped (`cutime`/`cstime`): pgbench's backends exit with it.
//! The load generator is what this process reaped (wrk and pgbench run as
//! its children and are waited for).

use std::path::Path;

/// CPU seconds used so far: the node, the database, the load generators.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    node: f64,
    database: f64,
    load: f64,
}

/// CPU microseconds per request of each side between two samples.
#[derive(Debug, Clone, Copy)]
pub struct PerRequest {
    pub node: f64,
    pub database: f64,
    pub load: f64,
}

impl PerRequest {
    /// Each side's share, named, and the rate two cores could serve if the
    /// three were all that ran: `node_name` empty when there is no node
    /// (pgbench's own read), PostgreSQL left out when it did nothing (a
    /// SQLite node).
    pub fn describe(&self, node_name: &str, load_name: &str) -> String {
        let total = self.node + self.database + self.load;
        let mut sides = Vec::new();
        if !node_name.is_empty() {
            sides.push(format!("{node_name} {:.0} µs", self.node));
        }
        if self.database >= 1.0 {
            sides.push(format!("PostgreSQL {:.0} µs", self.database));
        }
        sides.push(format!("{load_name} {:.0} µs", self.load));
        format!(
            "{}: {total:.0} µs in all, at most {:.0}/s on 2 cores",
            sides.join(", "),
            2e6 / total
        )
    }
}

/// The mean of several measurements of one path.
pub fn mean(measurements: &[PerRequest]) -> PerRequest {
    let count = measurements.len().max(1) as f64;
    let sum = |side: fn(&PerRequest) -> f64| measurements.iter().map(side).sum::<f64>() / count;
    PerRequest {
        node: sum(|each| each.node),
        database: sum(|each| each.database),
        load: sum(|each| each.load),
    }
}

/// The CPU used so far by the node with process id `node` (none: 0), by
/// PostgreSQL, and by this process's finished children.
pub fn sample(node: Option<u32>) -> Sample {
    let ticks_per_second = ticks_per_second();
    let node = node.map_or(0, |pid| {
        let fields = stat_fields(Path::new(&format!("/proc/{pid}/stat")))
            .expect("the node's /proc/<pid>/stat");
        fields.own
    });
    let mut database = 0;
    for entry in std::fs::read_dir("/proc").expect("Linux /proc").flatten() {
        let is_process = entry.file_name().to_string_lossy().parse::<u32>().is_ok();
        if !is_process {
            continue;
        }
        // A process that ended between the listing and the read is skipped:
        // its time is in its parent's reaped time.
        let Some(fields) = stat_fields(&entry.path().join("stat")) else {
            continue;
        };
        if fields.command == "postgres" {
            database += fields.own;
            if !is_postgres(fields.parent) {
                database += fields.reaped;
            }
        }
    }
    let own = stat_fields(Path::new("/proc/self/stat")).expect("/proc/self/stat");
    Sample {
        node: node as f64 / ticks_per_second,
        database: database as f64 / ticks_per_second,
        load: own.reaped as f64 / ticks_per_second,
    }
}

/// What each side used for each of `requests` between `before` and `after`.
pub fn per_request(before: Sample, after: Sample, requests: f64) -> PerRequest {
    let micros = |start: f64, end: f64| (end - start) * 1e6 / requests;
    PerRequest {
        node: micros(before.node, after.node),
        database: micros(before.database, after.database),
        load: micros(before.load, after.load),
    }
}

struct StatFields {
    command: String,
    parent: u32,
    /// utime + stime, in clock ticks.
    own: u64,
    /// cutime + cstime: the waited-for children's, in clock ticks.
    reaped: u64,
}

/// Fields of a `/proc/<pid>/stat` (proc(5)); the command is in parentheses
/// and may hold spaces, so the rest is read after its last `)`.
fn stat_fields(path: &Path) -> Option<StatFields> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let command = text[open + 1..close].to_owned();
    // After the command: state (field 3), ppid (4), … utime (14), stime
    // (15), cutime (16), cstime (17).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |number: usize| -> Option<u64> { rest.get(number - 3)?.parse().ok() };
    Some(StatFields {
        command,
        parent: u32::try_from(field(4)?).ok()?,
        own: field(14)? + field(15)?,
        reaped: field(16)? + field(17)?,
    })
}

fn is_postgres(pid: u32) -> bool {
    stat_fields(Path::new(&format!("/proc/{pid}/stat")))
        .is_some_and(|fields| fields.command == "postgres")
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), asked once;
/// 100 where it cannot be asked.
fn ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|output| String::from_utf8_lossy(&output.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}
