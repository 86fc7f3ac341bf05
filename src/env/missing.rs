//! The rule that every `null` of the environment record has a reason in `missing`.

use crate::ledger::Environment;

/// Moves a value into an `Option`, or its reason into `missing`.
pub(super) fn take<T>(missing: &mut Vec<String>, key: &str, value: Result<T, String>) -> Option<T> {
    match value {
        Ok(v) => Some(v),
        Err(reason) => {
            missing.push(format!("{key}: {reason}"));
            None
        }
    }
}

/// Adds a `missing` line for every `null` item that has none (`"cupti_path: not collected
/// (no reason recorded)"`), so that no item is ever absent silently. Call it last.
pub(crate) fn explain_nulls(env: &mut Environment) {
    let Ok(value) = serde_json::to_value(&*env) else {
        return;
    };
    let mut nulls = Vec::new();
    collect_nulls(&value, String::new(), &mut nulls);
    for path in nulls {
        if !env.missing.iter().any(|line| covers(line, &path)) {
            env.missing
                .push(format!("{path}: not collected (no reason recorded)"));
        }
    }
}

/// Whether a `missing` line explains the item at `path`: one of its keys (a line may name
/// several items that share a reason, `a, b: reason`) is the path or a parent of it.
fn covers(line: &str, path: &str) -> bool {
    let keys = line.split(": ").next().unwrap_or(line);
    keys.split(", ").any(|key| {
        path == key
            || path
                .strip_prefix(key)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    })
}

/// Appends the path of every `null` below `value` (outside the top-level `missing`) to `out`.
pub(super) fn collect_nulls(value: &serde_json::Value, path: String, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Null => out.push(path),
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                if path.is_empty() && k == "missing" {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                collect_nulls(v, p, out);
            }
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_nulls(v, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::covers;

    #[test]
    fn covers_parent_paths() {
        assert!(covers("nvml_gpus[0]: gone", "nvml_gpus[0].name"));
        assert!(covers("host.os: x", "host.os"));
        assert!(!covers("host.os: x", "host.os_type"));
        assert!(!covers("nvml_gpus[1]: gone", "nvml_gpus[10].name"));
        // One line for several items that share a reason.
        assert!(covers(
            "driver_version, nvml_gpus: no NVML",
            "nvml_gpus[0].name"
        ));
        assert!(covers(
            "driver_version, nvml_gpus: no NVML",
            "driver_version"
        ));
        assert!(!covers(
            "driver_version, nvml_gpus: no NVML",
            "nvml_version"
        ));
    }
}
