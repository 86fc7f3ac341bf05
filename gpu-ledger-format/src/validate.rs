//! What the reader checks beyond the JSON types: values that no run can produce (a time or a
//! count past 2^62, a window that ends before it starts) are errors at their line, naming the
//! field, so that no analysis sums them into wrong figures; and a line that does not parse is
//! explained by the field that failed, not by the offset serde found it at.

use serde::de::DeserializeOwned;

use crate::schema::{Header, IterationRow, Trailer};

/// The largest time (ns) or count a ledger value can hold: 2^62 ns is 146 years, and sums of a
/// few of them stay far from `u64::MAX`.
pub const MAX_PLAUSIBLE: u64 = 1 << 62;

/// Checks the values of a row that parsed; the error names the field.
pub(crate) fn check_row(row: &IterationRow) -> Result<(), String> {
    let mut c = Checker::default();
    c.at("host_start_ns", row.host_start_ns);
    c.at("host_wall_ns", row.host_wall_ns);
    c.at("dropped_records", row.dropped_records);
    c.at("missing_records", row.missing_records);
    for (i, d) in row.devices.iter().enumerate() {
        let f = |name: &str| format!("devices[{i}].{name}");
        c.at(&f("first_start_ns"), d.first_start_ns);
        c.at(&f("last_end_ns"), d.last_end_ns);
        c.at(&f("busy_ns"), d.busy_ns);
        c.at(&f("idle_ns"), d.idle_ns);
        c.at(&f("largest_gap_ns"), d.largest_gap_ns);
        c.at(&f("kernel_count"), d.kernel_count);
        if c.error.is_none() && d.last_end_ns < d.first_start_ns {
            c.error = Some(format!(
                "{} = {} is before {} = {}: the device's window cannot end before it starts",
                f("last_end_ns"),
                d.last_end_ns,
                f("first_start_ns"),
                d.first_start_ns
            ));
        }
    }
    for (i, s) in row.scopes.iter().enumerate() {
        let f = |name: &str| format!("scopes[{i}].{name}");
        c.at(&f("calls"), s.calls);
        c.at(&f("host_ns"), s.host_ns);
        c.at(&f("launches"), s.launches);
        c.at(&f("kernels"), s.kernels);
        c.at(&f("device_ns"), s.device_ns);
        c.at(&f("device_ns_inclusive"), s.device_ns_inclusive);
        c.at(&f("event_device_ns"), s.event_device_ns.unwrap_or(0));
    }
    for (i, k) in row.kernels.iter().enumerate() {
        let f = |name: &str| format!("kernels[{i}].{name}");
        c.at(&f("count"), k.count);
        c.at(&f("total_ns"), k.total_ns);
        c.at(&f("min_ns"), k.min_ns);
        c.at(&f("max_ns"), k.max_ns);
        c.at(&f("graph_launches"), k.graph_launches);
        c.at(&f("local_bytes_total"), k.local_bytes_total);
    }
    for (what, groups) in [("memcpy", &row.memcpy), ("memset", &row.memset)] {
        for (i, g) in groups.iter().enumerate() {
            let f = |name: &str| format!("{what}[{i}].{name}");
            c.at(&f("count"), g.count);
            c.at(&f("bytes"), g.bytes);
            c.at(&f("total_ns"), g.total_ns);
        }
    }
    for (i, s) in row.synchronization.iter().enumerate() {
        c.at(&format!("synchronization[{i}].count"), s.count);
        c.at(&format!("synchronization[{i}].total_ns"), s.total_ns);
    }
    c.error.map_or(Ok(()), Err)
}

/// Keeps the first implausible value.
#[derive(Default)]
struct Checker {
    error: Option<String>,
}

impl Checker {
    fn at(&mut self, field: &str, value: u64) {
        if self.error.is_none() && value > MAX_PLAUSIBLE {
            self.error = Some(format!(
                "{field} = {value} cannot be true (more than 2^62, 146 years in ns): the \
                 ledger is corrupt at this line; regenerate it, or remove the line"
            ));
        }
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
