//! The summary's section on PC sampling over the whole run, from the trailer's
//! [`RunStalls`]: each kernel's stall reasons summed over every window, beside the device time
//! that ranks it, and each scope's; with a duty cycle, what its windows cost against the budget
//! and whether the top kernels reached their samples. A ledger whose trailer has none gets no
//! section.

use std::fmt::Write as _;

use super::text::{fmt_ns, md_cell};
use crate::analysis::families::display_name;
use gpu_ledger_format::stalls::{reason_shares, DutyCycleCost, RunStalls};

/// Reasons named in a row of the tables.
const TOP_REASONS: usize = 4;
/// Kernels listed in the section: the top ones, then those with the most device time.
const KERNELS_SHOWN: usize = 20;
/// Scopes listed in the section, most samples first.
const SCOPES_SHOWN: usize = 20;

fn pct(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

/// A count map's largest reasons with their shares, and the rest together.
fn reasons(counts: &std::collections::BTreeMap<String, u64>) -> String {
    let shares = reason_shares(counts);
    let mut v: Vec<String> = shares
        .iter()
        .take(TOP_REASONS)
        .map(|(r, s)| format!("{r} {}", pct(*s)))
        .collect();
    if shares.len() > TOP_REASONS {
        let rest: f64 = shares[TOP_REASONS..].iter().map(|r| r.1).sum();
        v.push(format!("other {}", pct(rest)));
    }
    if v.is_empty() {
        "no samples".into()
    } else {
        v.join(", ")
    }
}

/// The duty cycle's sentence: windows, cost against the budget, and the coverage reached.
fn duty_line(d: &DutyCycleCost, top: usize, coverage: f64, short: &[String]) -> String {
    let reached = if d.covered {
        format!(
            "each of the {top} kernels holding {} of the device time reached {} samples",
            pct(coverage),
            d.target_samples
        )
    } else if top == 0 {
        "no kernel was ranked (no row with kernels on the sampled GPU was written)".into()
    } else {
        format!(
            "{} of the {top} kernels holding {} of the device time stayed short of {} samples \
             ({}): raise the budget or run longer",
            short.len(),
            pct(coverage),
            d.target_samples,
            short.join(", ")
        )
    };
    format!(
        "Duty cycle: {} window(s) opened ({} measured) cost {} of the run's {} wall time, \
         against a budget of {}; {reached}.",
        d.windows_opened,
        d.windows_measured,
        pct(d.cost_fraction()),
        fmt_ns(d.run_ns as f64),
        pct(d.budget)
    )
}

/// The section in Markdown, ending in a blank line.
pub fn markdown_section(p: &RunStalls) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "### PC sampling over the run ({} window{}, {} samples)\n",
        p.windows,
        if p.windows == 1 { "" } else { "s" },
        p.samples
    );
    let top = p.kernels.iter().filter(|k| k.top).count();
    if let Some(d) = &p.duty_cycle {
        let short: Vec<String> = p
            .kernels
            .iter()
            .filter(|k| k.top && k.samples < d.target_samples)
            .map(|k| md_cell(&display_name(&k.name)))
            .collect();
        let _ = writeln!(o, "{}\n", duty_line(d, top, p.coverage, &short));
    }
    let _ = writeln!(
        o,
        "Each kernel's samples summed over every window it ran in; \"top\" marks the kernels \
         that hold {} of the device time of the unperturbed rows together. {} samples \
         dropped; {} in functions no kernel record named (in no scope).\n",
        pct(p.coverage),
        p.dropped_samples,
        p.unattributed_samples
    );
    kernel_table(&mut o, p);
    scope_table(&mut o, p);
    o
}

fn kernel_table(o: &mut String, p: &RunStalls) {
    let _ = writeln!(
        o,
        "| kernel | device time | share | top | windows | samples | reasons |\n\
         |---|---:|---:|---|---:|---:|---|"
    );
    for k in p.kernels.iter().take(KERNELS_SHOWN) {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            md_cell(&display_name(&k.name)),
            fmt_ns(k.device_ns as f64),
            pct(k.device_share),
            if k.top { "yes" } else { "" },
            k.windows,
            k.samples,
            reasons(&k.by_reason)
        );
    }
    let left = p.kernels.len().saturating_sub(KERNELS_SHOWN) as u64 + p.kernels_left_out;
    if left > 0 {
        let _ = writeln!(
            o,
            "\n{left} more kernel(s) with less device time are not shown."
        );
    }
    o.push('\n');
}

fn scope_table(o: &mut String, p: &RunStalls) {
    if p.scopes.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "| scope | windows | samples | reasons |\n|---|---:|---:|---|"
    );
    for s in p.scopes.iter().take(SCOPES_SHOWN) {
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} |",
            md_cell(&s.scope),
            s.windows,
            s.samples,
            reasons(&s.by_reason)
        );
    }
    let left = p.scopes.len().saturating_sub(SCOPES_SHOWN) as u64 + p.scopes_left_out;
    if left > 0 {
        let _ = writeln!(
            o,
            "\n{left} more scope(s) with fewer samples are not shown."
        );
    }
    o.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_ledger_format::stalls::{KernelProfile, ScopeProfile};

    fn profile(covered: bool) -> RunStalls {
        let counts = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        RunStalls {
            windows: 3,
            samples: 9_000,
            coverage: 0.9,
            kernels: vec![
                KernelProfile {
                    name: "gemm".into(),
                    device_ns: 3_000_000_000,
                    device_share: 0.75,
                    top: true,
                    windows: 3,
                    samples: 8_000,
                    by_reason: counts(&[("math_pipe_throttle", 6_000), ("selected", 2_000)]),
                },
                KernelProfile {
                    name: "_Z6reducePf".into(),
                    device_ns: 700_000_000,
                    device_share: 0.175,
                    top: true,
                    windows: 3,
                    samples: 1_000,
                    by_reason: counts(&[("barrier", 1_000)]),
                },
            ],
            scopes: vec![ScopeProfile {
                scope: "step|odd".into(),
                windows: 3,
                samples: 9_000,
                by_reason: counts(&[("math_pipe_throttle", 6_000), ("selected", 3_000)]),
            }],
            duty_cycle: Some(DutyCycleCost {
                budget: 0.01,
                target_samples: 5_000,
                windows_opened: 3,
                windows_measured: 3,
                cost_ns: 60_000_000,
                run_ns: 10_000_000_000,
                covered,
            }),
            ..RunStalls::default()
        }
    }

    #[test]
    fn the_section_states_each_kernel_and_scope_with_its_windows_and_samples() {
        let s = markdown_section(&profile(false));
        assert!(s.starts_with("### PC sampling over the run (3 windows, 9000 samples)"));
        assert!(s.contains("cost 0.6 % of the run's 10.0 s wall time, against a budget of 1.0 %"));
        assert!(s.contains(
            "1 of the 2 kernels holding 90.0 % of the device time stayed short \
             of 5000 samples (reduce(float*))"
        ));
        assert!(s.contains(
            "| gemm | 3.00 s | 75.0 % | yes | 3 | 8000 | math_pipe_throttle 75.0 %, selected \
             25.0 % |"
        ));
        assert!(s.contains("| step\\|odd | 3 | 9000 |"), "{s}");
        let covered = markdown_section(&profile(true));
        assert!(covered.contains(
            "each of the 2 kernels holding 90.0 % of the device time \
             reached 5000 samples"
        ));
        let fixed = RunStalls {
            duty_cycle: None,
            ..profile(true)
        };
        assert!(!markdown_section(&fixed).contains("Duty cycle"));
    }
}
