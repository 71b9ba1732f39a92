//! The `sluice` command: `serve` (the default) and `check-config`. Parses arguments, sets up
//! logging and signals, and hands over to the library; exit codes are decided here only.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice::config::{self, LoadOptions};
use sluice::settings::ServeArgs;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "A rate limit server for Envoy and any gRPC client"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the rate limit API (what `sluice` alone does).
    Serve(Box<ServeArgs>),
    /// Validate configuration files or directories offline; exit 1 on any error.
    CheckConfig {
        /// Files or directories to check.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Let several files hold the same domain.
        #[arg(long, env = "MERGE_DOMAIN_CONFIG", action = clap::ArgAction::SetTrue,
              value_parser = clap::builder::FalseyValueParser::new())]
        merge_domain_config: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig {
            paths,
            merge_domain_config,
        }) => check_config(&paths, merge_domain_config),
        Some(Command::Serve(args)) => serve(*args),
        None => serve(cli.serve),
    }
}

fn check_config(paths: &[PathBuf], merge_domains: bool) -> ExitCode {
    match config::load(paths, LoadOptions { merge_domains }) {
        Ok(config) => {
            for domain in config.domains() {
                let files: Vec<String> = domain
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect();
                println!(
                    "domain {}: {} limits ({})",
                    domain.name,
                    domain.rules().len(),
                    files.join(", ")
                );
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    init_logging(&args.log_level, &args.log_format);
    let settings = match args.into_settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sluice: invalid setting: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(sluice::server::run(settings, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            eprintln!("sluice: {error}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str, format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if format.eq_ignore_ascii_case("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = interrupt => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = interrupt.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
