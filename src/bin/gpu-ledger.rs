//! The `gpu-ledger` command line tool (issue 6 fills it).

fn main() -> std::process::ExitCode {
    eprintln!("gpu-ledger: no subcommands yet");
    std::process::ExitCode::FAILURE
}
