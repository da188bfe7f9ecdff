//! `agent`: run agents from a spec, inspect traces and memories. See `agent --help`.

use std::error::Error as _;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = agent_cli::cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: no async runtime: {e}");
            return ExitCode::from(4);
        }
    };
    let result = runtime.block_on(agent_cli::execute(cli.command));
    // A tool stuck in a blocking read must not keep the process from exiting.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            // One line, then the causes: no backtraces for user errors.
            eprintln!("error: {error}");
            let mut cause = error.source();
            while let Some(c) = cause {
                eprintln!("  caused by: {c}");
                cause = c.source();
            }
            ExitCode::from(error.exit_code())
        }
    }
}
