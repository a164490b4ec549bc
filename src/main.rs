//! The `weir` binary: parse the command line and hand over to the library.

fn main() -> std::process::ExitCode {
    weir::cli::main()
}
