//! What the reader checks beyond the JSON types: values that no run can produce (a time or a
//! count past 2^62, a window that ends before it starts) are errors at their line, naming the
//! field, so that no analysis sums them into wrong figures; and a line that does not parse is
//! explained by the field that failed, not by the offset serde found it at.

use serde::de::DeserializeOwned;

use crate::schema::{Header, IterationRow, Trailer};

/// The largest time (ns) or count a ledger value can hold: 2^62 ns is 146 years, and sums of a
/// few of them stay far from `u64::MAX`.
pub const MAX_PLAUSIBLE: u64 = 1 << 62;

mod rules;
mod walk;

/// Checks the values of a row that parsed; the error names the field. Every unsigned integer of
/// the row is held to [`MAX_PLAUSIBLE`] (found through the row's serde description, so a new
/// field is checked with no list to extend), then the rules between fields (`rules.rs`, the one
/// place they are kept): windows, spans and activities that do not end before they start, busy
/// time within its window and idle time the rest of it, a device's idle causes (when it has
/// them) adding up to its idle time, NVML's figures within what a device shows.
pub(crate) fn check_row(row: &IterationRow) -> Result<(), String> {
    plausible(row)?;
    rules::check(row).map_err(|e| {
        format!("{e}; the ledger is corrupt at this line: regenerate it, or remove the line")
    })
}

/// Checks the values of a header or a trailer that parsed: every unsigned integer at most
/// [`MAX_PLAUSIBLE`], as in a row (a start time past it put a trace's events 584 years away).
pub(crate) fn check_record<T: serde::Serialize>(record: &T) -> Result<(), String> {
    plausible(record)
}

fn plausible<T: serde::Serialize>(record: &T) -> Result<(), String> {
    match walk::first_above(record, MAX_PLAUSIBLE) {
        Some(found) => Err(format!(
            "{} = {} cannot be true (more than 2^62, {}): the ledger is corrupt at this line; \
             regenerate it, or remove the line",
            found.path,
            found.value,
            bound_meaning(&found.path)
        )),
        None => Ok(()),
    }
}

/// What 2^62 is in the unit of the field at `path`: a time, a size or a count.
fn bound_meaning(path: &str) -> &'static str {
    let field = path.rsplit(['.', '[']).next().unwrap_or(path);
    if field.ends_with("_ns") {
        "146 years in ns"
    } else if field.contains("bytes") {
        "4 EiB"
    } else {
        "more than any run counts"
    }
}

/// Why a line that is complete JSON (or not JSON at all) is not a ledger line: the line's
/// type, and the field that failed with its path (`devices[0].busy_ns: invalid type ...`).
pub(crate) fn diagnose(text: &str) -> String {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return format!("invalid ledger line: not JSON ({})", without_position(&e)),
    };
    let Some(obj) = value.as_object() else {
        return "invalid ledger line: not a JSON object; expected an object with \"type\" \
                header, iteration or trailer"
            .into();
    };
    match obj.get("type") {
        None => "invalid ledger line: no \"type\" field; expected \"type\" header, iteration \
                 or trailer"
            .into(),
        Some(serde_json::Value::String(t)) => match t.as_str() {
            "header" => field_error::<Header>(text, "header"),
            "iteration" => field_error::<IterationRow>(text, "iteration row"),
            "trailer" => field_error::<Trailer>(text, "trailer"),
            other => format!(
                "unknown line type {other:?}: expected \"type\" header, iteration or trailer"
            ),
        },
        Some(other) => format!(
            "invalid ledger line: \"type\" is {other}, not a string; expected \"header\", \
             \"iteration\" or \"trailer\""
        ),
    }
}

/// The failing field of a line of type `what`, with its path.
fn field_error<T: DeserializeOwned>(text: &str, what: &str) -> String {
    let mut de = serde_json::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(_) => format!("invalid {what}"),
        Err(e) => {
            let path = e.path().to_string();
            let inner = without_position(&e.into_inner());
            let fix = "fix that value, or regenerate the ledger";
            if path == "." {
                format!("invalid {what}: {inner}; {fix}")
            } else {
                format!("invalid {what}: {path}: {inner}; {fix}")
            }
        }
    }
}

/// serde_json's message with its column but not its "line 1" (the reader parses one line at a
/// time, so serde's line number is not the file's).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let text = text
        .rfind(" at line ")
        .map_or(text.as_str(), |at| &text[..at]);
    format!("{text} (column {})", e.column())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::schema::{ActivityEntry, DeviceIteration, KernelGroup, LaunchThread};
    use crate::stalls::{IterationStalls, KernelStalls};

    const HUGE: u64 = MAX_PLAUSIBLE + 1;

    fn field_of(row: &IterationRow) -> String {
        let e = check_row(row).expect_err("an implausible value is refused");
        e.split(" = ").next().unwrap_or_default().to_string()
    }

    #[test]
    fn a_plausible_row_passes() {
        let row = IterationRow {
            host_wall_ns: MAX_PLAUSIBLE,
            devices: vec![DeviceIteration {
                first_start_ns: 5,
                last_end_ns: 5,
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        };
        assert_eq!(check_row(&row), Ok(()));
    }

    #[test]
    fn every_unsigned_field_is_checked_and_named_without_a_list() {
        let mut row = IterationRow {
            tracing_added_ns: Some(HUGE),
            ..IterationRow::default()
        };
        assert_eq!(field_of(&row), "tracing_added_ns");
        row.tracing_added_ns = None;
        row.activities = Some(vec![
            ActivityEntry::default(),
            ActivityEntry {
                end_ns: HUGE,
                ..ActivityEntry::default()
            },
        ]);
        assert_eq!(field_of(&row), "activities[1].end_ns");
        row.activities = None;
        row.launch_threads = vec![LaunchThread {
            kernel_ns: HUGE,
            ..LaunchThread::default()
        }];
        assert_eq!(field_of(&row), "launch_threads[0].kernel_ns");
        row.launch_threads.clear();
        // A struct with a flattened field is walked as a map: its fields keep their names.
        row.kernels = vec![KernelGroup {
            count: HUGE,
            ..KernelGroup::default()
        }];
        assert_eq!(field_of(&row), "kernels[0].count");
        row.kernels.clear();
        row.stalls = Some(IterationStalls {
            kernels: vec![KernelStalls {
                by_reason: BTreeMap::from([("long scoreboard".to_string(), HUGE)]),
                ..KernelStalls::default()
            }],
            ..IterationStalls::default()
        });
        assert_eq!(
            field_of(&row),
            r#"stalls.kernels[0].by_reason["long scoreboard"]"#
        );
    }

    #[test]
    fn the_message_names_the_value_and_the_fix() {
        let row = IterationRow {
            devices: vec![DeviceIteration {
                busy_ns: HUGE,
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        };
        let e = check_row(&row).unwrap_err();
        assert_eq!(
            e,
            format!(
                "devices[0].busy_ns = {HUGE} cannot be true (more than 2^62, 146 years in ns): \
                 the ledger is corrupt at this line; regenerate it, or remove the line"
            )
        );
        // A count and a size are not said in years.
        let count = IterationRow {
            dropped_records: HUGE,
            ..IterationRow::default()
        };
        assert!(check_row(&count)
            .unwrap_err()
            .contains("(more than 2^62, more than any run counts)"));
        let size = IterationRow {
            devices: vec![DeviceIteration {
                peak_memory_bytes: Some(HUGE),
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        };
        assert!(check_row(&size)
            .unwrap_err()
            .contains("(more than 2^62, 4 EiB)"));
    }

    #[test]
    fn fields_that_contradict_each_other_are_refused_by_name() {
        use crate::nvml::{NvmlIterationSummary, PowerKind, PowerStats};
        use crate::schema::{ActivityEntry, ScopeSpan};
        let window = |busy, idle, gap| DeviceIteration {
            first_start_ns: 100,
            last_end_ns: 200,
            busy_ns: busy,
            idle_ns: idle,
            largest_gap_ns: gap,
            ..DeviceIteration::default()
        };
        let device = |d| IterationRow {
            devices: vec![d],
            ..IterationRow::default()
        };
        assert_eq!(check_row(&device(window(60, 40, 40))), Ok(()));
        let cases: Vec<(IterationRow, &str)> = vec![
            (
                device(window(101, 0, 0)),
                "devices[0].busy_ns = 101 is more than the window",
            ),
            (
                device(window(60, 41, 0)),
                "devices[0].idle_ns = 41 is not the window",
            ),
            (
                device(window(60, 40, 41)),
                "devices[0].largest_gap_ns = 41 is more than",
            ),
            (
                IterationRow {
                    activities: Some(vec![ActivityEntry {
                        start_ns: 5,
                        end_ns: 4,
                        ..ActivityEntry::default()
                    }]),
                    ..IterationRow::default()
                },
                "activities[0].end_ns = 4 is before activities[0].start_ns = 5",
            ),
            (
                IterationRow {
                    scope_spans: Some(vec![
                        ScopeSpan::default(),
                        ScopeSpan {
                            start_ns: 9,
                            end_ns: 1,
                            ..ScopeSpan::default()
                        },
                    ]),
                    ..IterationRow::default()
                },
                "scope_spans[1].end_ns = 1 is before scope_spans[1].start_ns = 9",
            ),
            (
                IterationRow {
                    kernels: vec![KernelGroup {
                        count: 1,
                        min_ns: 9,
                        max_ns: 3,
                        ..KernelGroup::default()
                    }],
                    ..IterationRow::default()
                },
                "kernels[0].min_ns = 9 is more than kernels[0].max_ns = 3",
            ),
            (
                IterationRow {
                    nvml: vec![NvmlIterationSummary {
                        power: Some(PowerStats {
                            mean_w: -3.0,
                            max_w: 1.0,
                            samples: 1,
                            kind: PowerKind::Instant,
                        }),
                        ..NvmlIterationSummary::default()
                    }],
                    ..IterationRow::default()
                },
                "nvml[0].power.mean_w = -3 is not a figure a device shows",
            ),
        ];
        for (row, want) in cases {
            let e = check_row(&row).unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn an_unknown_nvml_figure_is_not_an_error() {
        use crate::nvml::{NvmlIterationSummary, PowerKind, PowerStats};
        // NVML's unknown figure (null, read as NaN).
        let unknown = IterationRow {
            nvml: vec![NvmlIterationSummary {
                power: Some(PowerStats {
                    mean_w: f64::NAN,
                    max_w: f64::NAN,
                    samples: 0,
                    kind: PowerKind::Average,
                }),
                ..NvmlIterationSummary::default()
            }],
            ..IterationRow::default()
        };
        assert_eq!(check_row(&unknown), Ok(()));
    }

    #[test]
    fn a_header_or_trailer_value_past_the_bound_is_refused() {
        let header = Header {
            start_cupti_ns: Some(u64::MAX),
            ..Header::default()
        };
        assert!(check_record(&header)
            .unwrap_err()
            .starts_with("start_cupti_ns = 18446744073709551615 cannot be true"));
        let trailer = Trailer {
            late_records: HUGE,
            ..Trailer::default()
        };
        assert!(check_record(&trailer)
            .unwrap_err()
            .starts_with("late_records = "));
    }

    #[test]
    fn idle_causes_that_do_not_add_up_to_idle_ns_are_refused() {
        use crate::idle::{IdleBreakdown, IdleCause};
        // A window of 10 ns, all of it idle.
        let mut row = IterationRow {
            devices: vec![DeviceIteration {
                last_end_ns: 10,
                idle_ns: 10,
                idle: Some(IdleBreakdown {
                    causes: vec![IdleCause {
                        ns: 10,
                        ..IdleCause::default()
                    }],
                    compute_idle_ns: 10,
                    ..IdleBreakdown::default()
                }),
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        };
        assert_eq!(check_row(&row), Ok(()));
        if let Some(idle) = &mut row.devices[0].idle {
            idle.causes[0].ns = 9;
        }
        assert!(check_row(&row)
            .unwrap_err()
            .starts_with("devices[0].idle.causes add up to 9 ns"));
    }

    #[test]
    fn a_window_that_ends_before_it_starts_is_refused() {
        let row = IterationRow {
            devices: vec![DeviceIteration {
                first_start_ns: 10,
                last_end_ns: 9,
                ..DeviceIteration::default()
            }],
            ..IterationRow::default()
        };
        assert!(check_row(&row)
            .unwrap_err()
            .starts_with("devices[0].last_end_ns = 9 is before"));
    }
}
