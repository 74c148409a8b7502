fn main() -> std::process::ExitCode {
    weir::cli::main()
}
