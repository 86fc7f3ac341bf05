//! Markdown tables padded into columns, for reading on a terminal: the text stays Markdown
//! (pasted into an issue it renders as before), only spaces are added so that every `|` of a
//! table lines up. Right-aligned columns (`---:`) are padded on the left.

use unicode_width::UnicodeWidthStr;

/// `md` with each table's cells padded to its column's width, counted in terminal columns (a
/// CJK character or an emoji takes two, a combining mark none), so that a scope named in any
/// script lines up.
pub fn align_tables(md: &str) -> String {
    let mut out = String::with_capacity(md.len() + md.len() / 4);
    let mut table: Vec<&str> = Vec::new();
    for line in md.split_inclusive('\n') {
        if line.starts_with('|') {
            table.push(line);
            continue;
        }
        flush(&mut table, &mut out);
        out.push_str(line);
    }
    flush(&mut table, &mut out);
    out
}

/// The cells of a table line, trimmed, split at each `|` not escaped by a backslash.
fn cells(line: &str) -> Vec<String> {
    let body = line.trim_end_matches(['\n', '\r']).trim();
    let body = body.strip_prefix('|').unwrap_or(body);
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cell.push(c);
                if let Some(n) = chars.next() {
                    cell.push(n);
                }
            }
            '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
            c => cell.push(c),
        }
    }
    // A line ends with `|`; text after the last one is a cell only when not blank.
    if !cell.trim().is_empty() {
        cells.push(cell.trim().to_string());
    }
    cells
}

/// Whether `cell` is one of the delimiter row's (`---`, `:---`, `---:`, `:---:`).
fn is_delimiter(cell: &str) -> bool {
    let core = cell.trim_start_matches(':').trim_end_matches(':');
    !core.is_empty() && core.chars().all(|c| c == '-')
}

/// Writes the table held in `lines` aligned into `out`, and empties `lines`.
fn flush(lines: &mut Vec<&str>, out: &mut String) {
    if lines.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = lines.iter().map(|l| cells(l)).collect();
    let delimiter = rows
        .get(1)
        .filter(|r| !r.is_empty() && r.iter().all(|c| is_delimiter(c)));
    let Some(delimiter) = delimiter.cloned() else {
        // Not a table after all (no delimiter row): as it was.
        lines.drain(..).for_each(|l| out.push_str(l));
        return;
    };
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width = |c: &str| c.width();
    let mut widths = vec![3usize; n];
    // The delimiter row is drawn to the others' widths, never sets them.
    for r in rows
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, r)| r)
    {
        for (j, c) in r.iter().enumerate() {
            widths[j] = widths[j].max(width(c));
        }
    }
    let right: Vec<bool> = (0..n)
        .map(|j| delimiter.get(j).is_some_and(|d| d.ends_with(':')))
        .collect();
    for (i, r) in rows.iter().enumerate() {
        out.push('|');
        for j in 0..n {
            let w = widths[j];
            if i == 1 {
                let d = delimiter.get(j).map_or("---", String::as_str);
                let (l, rr) = (d.starts_with(':'), d.ends_with(':'));
                let dashes = w - usize::from(l) - usize::from(rr);
                out.push(' ');
                out.push_str(if l { ":" } else { "" });
                out.push_str(&"-".repeat(dashes));
                out.push_str(if rr { ":" } else { "" });
                out.push_str(" |");
                continue;
            }
            let c = r.get(j).map_or("", String::as_str);
            let pad = " ".repeat(w - width(c));
            if right[j] {
                out.push_str(&format!(" {pad}{c} |"));
            } else {
                out.push_str(&format!(" {c}{pad} |"));
            }
        }
        out.push('\n');
    }
    lines.clear();
}

#[cfg(test)]
mod tests {
    use super::align_tables;
    use unicode_width::UnicodeWidthStr;

    #[test]
    fn tables_line_up_and_text_around_them_does_not_move() {
        let md = "# t\n\n| a | bb |\n|---|---:|\n| ccc | 1 |\n| d\\|e | 22 |\n\nafter | x\n";
        let got = align_tables(md);
        assert_eq!(
            got,
            "# t\n\n| a    |  bb |\n| ---- | --: |\n| ccc  |   1 |\n| d\\|e |  22 |\n\nafter | x\n"
        );
        // Aligned twice is aligned once.
        assert_eq!(align_tables(&got), got);
        // Every line of the table is as long as the others.
        let lens: Vec<usize> = got
            .lines()
            .filter(|l| l.starts_with('|'))
            .map(UnicodeWidthStr::width)
            .collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]), "{lens:?}");
    }

    #[test]
    fn wide_and_combining_characters_are_padded_by_the_columns_they_take() {
        // "前向き" takes six columns, "e\u{301}" (e and a combining accent) one.
        let md = "| scope | ms |\n|---|---:|\n| 前向き | 1 |\n| e\u{301} | 22 |\n";
        let got = align_tables(md);
        assert_eq!(
            got,
            "| scope  |  ms |\n| ------ | --: |\n| 前向き |   1 |\n| e\u{301}      |  22 |\n"
        );
        let lens: Vec<usize> = got.lines().map(UnicodeWidthStr::width).collect();
        assert!(lens.windows(2).all(|w| w[0] == w[1]), "{lens:?}");
    }

    #[test]
    fn lines_that_only_start_with_a_bar_stay_as_they_are() {
        let md = "| not a table\n| really\n";
        assert_eq!(align_tables(md), md);
        // A row with fewer cells is padded to the table's columns.
        assert_eq!(
            align_tables("| a | b |\n|---|---|\n| c |\n"),
            "| a   | b   |\n| --- | --- |\n| c   |     |\n"
        );
    }
}
