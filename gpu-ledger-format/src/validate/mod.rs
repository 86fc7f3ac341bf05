//! What the reader checks beyond the JSON types: values that no run can produce (a time or a
//! count past 2^62, a window that ends before it starts) are errors at their line, naming the
//! field, so that no analysis sums them into wrong figures; and a line that does not parse is
//! explained by the field that failed, not by the offset serde found it at.

use serde::de::DeserializeOwned;

use crate::schema::{Header, IterationRow, Trailer};

/// The largest time (ns) or count a ledger value can hold: 2^62 ns is 146 years, and sums of a
/// few of them stay far from `u64::MAX`.
pub const MAX_PLAUSIBLE: u64 = 1 << 62;

mod walk;

/// Checks the values of a row that parsed; the error names the field. Every unsigned integer of
/// the row is held to [`MAX_PLAUSIBLE`] (found through the row's serde description, so a new
/// field is checked with no list to extend), and each device's window must not end before it
/// starts.
pub(crate) fn check_row(row: &IterationRow) -> Result<(), String> {
    if let Some(found) = walk::first_above(row, MAX_PLAUSIBLE) {
        return Err(format!(
            "{} = {} cannot be true (more than 2^62, {}): the ledger is corrupt at this line; \
             regenerate it, or remove the line",
            found.path,
            found.value,
            bound_meaning(&found.path)
        ));
    }
    for (i, d) in row.devices.iter().enumerate() {
        if d.last_end_ns < d.first_start_ns {
            let f = |name: &str| format!("devices[{i}].{name}");
            return Err(format!(
                "{} = {} is before {} = {}: the device's window cannot end before it starts",
                f("last_end_ns"),
                d.last_end_ns,
                f("first_start_ns"),
                d.first_start_ns
            ));
        }
    }
    Ok(())
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
