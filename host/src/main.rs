//! The `wasmtap` command. Exit codes: 0 ok, 1 finished with problems (a plugin
//! disabled, events lost), 2 fatal (bad input, cannot start).

use std::process::ExitCode;

fn main() -> ExitCode {
    wasmtap::sys::tune_allocator();
    let args = match wasmtap::cli::expand_script(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("wasmtap: error: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match wasmtap::cli::Cli::try_parse_args(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match wasmtap::cli::run(cli) {
        Ok(wasmtap::cli::Outcome::Clean) => ExitCode::SUCCESS,
        Ok(wasmtap::cli::Outcome::Problems) => ExitCode::from(1),
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("wasmtap: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
