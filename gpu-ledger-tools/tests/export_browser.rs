//! The HTML report rendered in a real headless browser (Debian's `chromium`): the DOM the browser
//! builds holds every SVG chart, the console reports no error (a page with a deliberate script
//! error proves the console is being read), and a screenshot is taken.
//!
//! Chromium is not on CI machines: run `scripts/browser-test.sh`, which installs it when missing
//! and runs this test with `--ignored`. Screenshots are left in `target/browser-test/` to look at.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpu_ledger_tools::export::{write_html_report, ReportOptions};

mod export_common;
use export_common::{read, CHARTS};

fn chromium() -> PathBuf {
    let candidates = [
        std::env::var("CHROMIUM").unwrap_or_default(),
        "chromium".into(),
        "chromium-browser".into(),
        "google-chrome".into(),
    ];
    for c in candidates.iter().filter(|c| !c.is_empty()) {
        if Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return PathBuf::from(c);
        }
    }
    panic!(
        "no headless browser found: install Debian's chromium (`apt-get install -y chromium`, or \
         run scripts/browser-test.sh, which does it), or set CHROMIUM to a Chromium binary"
    );
}

fn run_browser(browser: &Path, profile: &Path, extra: &[String], url: &str) -> Output {
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-extensions",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra)
    .arg(url);
    let out = cmd.output().expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Console messages chromium logged (errors, CSP refusals, uncaught exceptions).
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Refused to") || l.contains("Uncaught"))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs chromium (apt-get install chromium)"]
fn report_renders_in_headless_chromium() {
    let browser = chromium();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = root.join("../target/browser-test");
    std::fs::create_dir_all(&out_dir).unwrap();
    let profile = tempfile::tempdir().unwrap();

    // The console is read: a deliberate script error must show up.
    let bad = out_dir.join("console-control.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><p>control</p><script>no_such_function();</script></body></html>",
    )
    .unwrap();
    let o = run_browser(
        &browser,
        profile.path(),
        &["--dump-dom".into()],
        &format!("file://{}", bad.display()),
    );
    let control = console_lines(&o.stderr);
    assert!(
        control.iter().any(|l| l.contains("no_such_function")),
        "the console of chromium is not captured, so the check below would prove nothing: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    for name in [
        "v1-nested-scopes",
        "v1-overlapping-streams",
        "v1-graph-kernels",
        "v1-missing-nvml",
    ] {
        let ledger = read(&format!("{name}.jsonl"));
        let html_path = out_dir.join(format!("{name}.html"));
        let mut f = std::fs::File::create(&html_path).unwrap();
        write_html_report(&ledger, name, &ReportOptions::default(), &mut f).unwrap();
        drop(f);
        let url = format!("file://{}", html_path.display());

        let o = run_browser(&browser, profile.path(), &["--dump-dom".into()], &url);
        let dom = String::from_utf8_lossy(&o.stdout);
        assert!(dom.contains("<h1>"), "{name}: empty DOM: {dom}");
        for id in CHARTS {
            if name == "v1-missing-nvml" && id == "chart-scopes-device" {
                continue;
            }
            let tag = format!("<svg id=\"{id}\"");
            assert!(dom.contains(&tag), "{name}: {id} not in the DOM");
        }
        // The parser kept the SVG elements as SVG (a broken document would flatten them).
        assert!(dom.matches("<rect").count() > 5, "{name}: no SVG shapes");
        assert_eq!(dom.matches("<svg").count(), dom.matches("</svg>").count());
        let errors = console_lines(&o.stderr);
        assert!(errors.is_empty(), "{name}: console messages: {errors:#?}");

        let png = out_dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&png);
        let o = run_browser(
            &browser,
            profile.path(),
            &[
                format!("--screenshot={}", png.display()),
                "--window-size=1100,3800".into(),
            ],
            &url,
        );
        let errors = console_lines(&o.stderr);
        assert!(errors.is_empty(), "{name}: console messages: {errors:#?}");
        let bytes = std::fs::read(&png).expect("screenshot written");
        assert!(bytes.starts_with(b"\x89PNG"), "{name}: not a PNG");
        assert!(
            bytes.len() > 20_000,
            "{name}: screenshot suspiciously small"
        );
        eprintln!("screenshot: {}", png.display());
    }
}

/// At 480 px (a phone, a narrow split pane) a table keeps its names readable: a kernel family
/// or scope name wraps at 14 characters or more a line, never one letter per line, and the
/// page itself does not scroll sideways (a wide table scrolls in its own box). Measured in the
/// browser by a copy of the report with a script that writes the layout into the DOM (the
/// report itself allows no script). A screenshot of the narrowest window headless Chromium
/// opens (500 px) is left beside the others.
#[test]
#[ignore = "needs chromium (apt-get install chromium)"]
fn tables_stay_readable_at_480_px() {
    let browser = chromium();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = root.join("../target/browser-test");
    std::fs::create_dir_all(&out_dir).unwrap();
    let profile = tempfile::tempdir().unwrap();
    for name in ["v1-graph-kernels", "v1-nested-scopes"] {
        let ledger = read(&format!("{name}.jsonl"));
        let mut html = Vec::new();
        write_html_report(&ledger, name, &ReportOptions::default(), &mut html).unwrap();
        let html = String::from_utf8(html).unwrap();
        let png = out_dir.join(format!("{name}-480.png"));
        let page = out_dir.join(format!("{name}-480.html"));
        std::fs::write(&page, &html).unwrap();
        let o = run_browser(
            &browser,
            profile.path(),
            &[
                format!("--screenshot={}", png.display()),
                "--window-size=480,3000".into(),
            ],
            &format!("file://{}", page.display()),
        );
        assert!(console_lines(&o.stderr).is_empty(), "{name}");
        // The copy that measures: the policy that forbids scripts left out, and the page held
        // at 480 px (a headless window is never narrower than 500).
        let start = html
            .find("<meta http-equiv=\"Content-Security-Policy\"")
            .unwrap();
        let end = start + html[start..].find('>').unwrap() + 1;
        let probe = format!(
            "{}<style>html {{ width: 480px; }}</style>{}",
            &html[..start],
            html[end..].replace(
                "</body>",
                "<script>\
                 const cells = [...document.querySelectorAll('td.l')].map(td => {\
                   const r = document.createRange(); r.selectNodeContents(td);\
                   const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top))).size;\
                   return [td.textContent.length, Math.max(lines, 1)];\
                 });\
                 document.body.setAttribute('data-layout', JSON.stringify({\
                   page: document.body.scrollWidth, cells }));\
                 </script></body>"
            )
        );
        let probe_path = out_dir.join(format!("{name}-480-probe.html"));
        std::fs::write(&probe_path, probe).unwrap();
        let o = run_browser(
            &browser,
            profile.path(),
            &["--dump-dom".into(), "--window-size=480,3000".into()],
            &format!("file://{}", probe_path.display()),
        );
        let dom = String::from_utf8_lossy(&o.stdout);
        let json = dom
            .split("data-layout=\"")
            .nth(1)
            .unwrap_or_else(|| panic!("{name}: the probe did not run: {dom}"))
            .split('"')
            .next()
            .unwrap()
            .replace("&quot;", "\"");
        let layout: serde_json::Value = serde_json::from_str(&json).unwrap();
        let page_width = layout["page"].as_f64().unwrap();
        assert!(
            page_width <= 480.0,
            "{name}: the page scrolls sideways ({page_width} px)"
        );
        let cells = layout["cells"].as_array().unwrap();
        assert!(!cells.is_empty(), "{name}: no name cell measured");
        for c in cells {
            let (chars, lines) = (c[0].as_f64().unwrap(), c[1].as_f64().unwrap());
            assert!(
                chars / lines >= 14.0_f64.min(chars),
                "{name}: a name of {chars} characters wraps on {lines} lines at 480 px"
            );
        }
        eprintln!("screenshot: {}", png.display());
    }
}
