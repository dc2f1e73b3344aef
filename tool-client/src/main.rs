//! The `fsd-tools` binary: parses flags and runs the command.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    fsd_tool_client::cli::main()
}
