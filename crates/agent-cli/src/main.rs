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
            let mut shown = error.to_string();
            eprintln!("error: {shown}");
            let mut cause = error.source();
            while let Some(c) = cause {
                // Many errors repeat their cause in their own message: say each thing once.
                let text = c.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {text}");
                    shown.push_str(&text);
                }
                cause = c.source();
            }
            ExitCode::from(error.exit_code())
        }
    }
}
