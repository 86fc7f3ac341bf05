//! Wall time and peak resident memory (VmHWM) of a child process, for the benchmarks that run
//! the `gpu-ledger` binary and compare commands side by side.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Wall time and peak resident memory of one child process.
pub struct Measured {
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// Peak resident set, KiB.
    pub peak_kib: u64,
}

impl Measured {
    /// Peak resident set, MiB.
    #[allow(dead_code)] // not every benchmark prints it
    pub fn peak_mb(&self) -> f64 {
        self.peak_kib as f64 / 1024.0
    }
}

/// Runs `cmd` (stdout discarded) and samples its VmHWM until it exits; a failure is an error
/// with its stderr.
pub fn measure(cmd: &mut Command) -> Result<Measured, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            if let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = start.elapsed();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut err)?;
        }
        return Err(format!("{cmd:?} failed: {err}").into());
    }
    Ok(Measured { wall, peak_kib })
}
