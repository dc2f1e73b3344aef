//! The `fsd-approver` binary: parses flags and runs the command.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    fsd_approver::main()
}
