//! Per-process figures read from `/proc`: CPU time (user + sys), resident memory, open file
//! descriptors and context switches.

use std::fs;
use std::sync::OnceLock;

use anyhow::{Context as _, Result, anyhow};

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`, 100 when unknown).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse::<f64>().ok())
            .filter(|ticks| *ticks > 0.0)
            .unwrap_or(100.0)
    })
}

/// CPU seconds (user + sys, all threads, living and exited) used so far by process `pid` alone.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may contain spaces: fields resume after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("malformed /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime is field 14, stime field 15.
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .ok_or_else(|| anyhow!("short /proc/{pid}/stat"))?
            .parse::<u64>()
            .with_context(|| format!("field {n} of /proc/{pid}/stat"))
    };
    let ticks = field(14)? + field(15)?;
    Ok(ticks as f64 / clock_ticks())
}

/// A `Vm*` line of `/proc/<pid>/status`, in KiB.
fn status_kib(pid: u32, key: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| anyhow!("no {key} in /proc/{pid}/status"))
}

/// Resident set size now, in KiB.
pub(crate) fn rss_kib(pid: u32) -> Result<u64> {
    status_kib(pid, "VmRSS")
}

/// Peak resident set size (high-water mark), in KiB.
pub(crate) fn peak_rss_kib(pid: u32) -> Result<u64> {
    status_kib(pid, "VmHWM")
}

/// Open file descriptors (sockets, mostly) of process `pid`.
pub(crate) fn open_fds(pid: u32) -> Result<usize> {
    Ok(fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("listing /proc/{pid}/fd"))?
        .count())
}

/// Context switches of a process so far, summed over its living threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ContextSwitches {
    /// The thread gave up the CPU (blocked, i.e. waited for a wakeup).
    pub(crate) voluntary: u64,
    /// The scheduler took the CPU from the thread (preempted).
    pub(crate) involuntary: u64,
}

/// `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` of every thread in
/// `/proc/<pid>/task/*/status`, summed (a thread that exited meanwhile takes its counts along).
pub(crate) fn context_switches(pid: u32) -> Result<ContextSwitches> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("listing /proc/{pid}/task"))?;
    let mut total = ContextSwitches::default();
    for task in tasks {
        // A thread may exit between the listing and the read: skip it.
        let Ok(status) = fs::read_to_string(task?.path().join("status")) else {
            continue;
        };
        let field = |key: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.trim_start_matches(':').trim().parse().ok())
                .unwrap_or(0)
        };
        total.voluntary += field("voluntary_ctxt_switches");
        total.involuntary += field("nonvoluntary_ctxt_switches");
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).unwrap() >= 0.0);
        assert!(rss_kib(pid).unwrap() > 0);
        assert!(peak_rss_kib(pid).unwrap() >= rss_kib(pid).unwrap() / 2);
    }

    #[test]
    fn counts_context_switches_of_this_process() {
        let pid = std::process::id();
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Each sleep blocked this (living) thread once: at least 20 voluntary switches. (Other
        // test threads may exit meanwhile, so no before/after comparison.)
        let after = context_switches(pid).unwrap();
        assert!(after.voluntary >= 20, "{after:?}");
    }
}
