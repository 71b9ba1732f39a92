//! The `sluice` command: `serve` (the default), `check-config`, `simulate` and `replay`; run as
//! `limitador-server`, Limitador's command line. Parses arguments, sets up logging and
//! signals, and hands over to the library; exit codes are decided here only.
// The async bodies over the served store (its regions, its failure answer, Redis behind its
// layers) are deeper than the compiler's default layout query depth.
#![recursion_limit = "256"]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use tokio::sync::Notify;

use clap::{Parser, Subcommand};
use sluice::limitador_cli;
use sluice::simulate::{self, traffic, Simulation, Traffic};
use sluice_config::LoadOptions;
use sluice_server::otel;
use sluice_server::server::{self, Listeners};
use sluice_server::settings::{LogFormat, ServeArgs};

/// mimalloc instead of glibc's malloc: 9-11% less CPU per decision (BENCHMARKS.md, "What do the build profiles cost?").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        /// Limits that do not say `debt` take debt (as `serve --debt`).
        #[arg(long, env = "SLUICE_DEBT", action = clap::ArgAction::SetTrue,
              value_parser = clap::builder::FalseyValueParser::new())]
        debt: bool,
        /// A file of admin overrides (a list, or the admin API's list answer) to check
        /// against the config: how many would be in force, and each refused one.
        #[arg(long)]
        overrides: Option<PathBuf>,
    },
    /// Replay synthetic traffic against a config on a virtual clock and show what each
    /// request gets, per descriptor: a chart per time bucket, or every decision as CSV.
    Simulate(Box<SimulateArgs>),
    /// Decide recorded calls (`serve --record`) again under a config and report, per rule,
    /// what it changes against the recorded decisions or a baseline config; exit 3 when the
    /// newly denied share passes a threshold.
    Replay(Box<ReplayArgs>),
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// The config under test: a file or directory; repeatable.
    #[arg(long = "config", required = true)]
    config: Vec<PathBuf>,
    /// A config to compare with, replayed the same way (instead of the recorded decisions);
    /// repeatable.
    #[arg(long)]
    baseline: Vec<PathBuf>,
    /// Compare with the config under test without its reservations (`reserve` left out,
    /// each settle a plain charge of its actual cost), instead of --baseline.
    #[arg(long, conflicts_with = "baseline")]
    without_reserve: bool,
    /// Recordings, in time order (a rotated `FILE.1` before `FILE`).
    #[arg(required = true)]
    recordings: Vec<PathBuf>,
    /// A file of admin overrides in force under the config under test (a list, or the
    /// admin API's list answer).
    #[arg(long)]
    overrides: Option<PathBuf>,
    /// Let several files hold the same domain.
    #[arg(long)]
    merge_domain_config: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also draw the report, per rule over time, as an SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Exit 3 when more than this percent of the calls are newly denied.
    #[arg(long)]
    max_newly_denied: Option<f64>,
    /// Exit 3 when more than this percent of any rule's calls are newly denied.
    #[arg(long)]
    max_newly_denied_per_rule: Option<f64>,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// Configuration file or directory; repeatable.
    #[arg(long = "config", default_value = "config")]
    config: Vec<PathBuf>,
    /// Let several files hold the same domain.
    #[arg(long)]
    merge_domain_config: bool,
    /// Limits that do not say `debt` take debt (as `serve --debt`).
    #[arg(long)]
    debt: bool,
    /// The domain of the requests.
    #[arg(long)]
    domain: String,
    /// A descriptor, `key=value[,key=value...]`; repeatable, each simulated on its own.
    #[arg(long, required = true)]
    descriptor: Vec<String>,
    /// Every request carries every descriptor, as a request of several descriptors.
    #[arg(long)]
    together: bool,
    /// The cost (hits_addend) of each request of the traffic.
    #[arg(long, default_value_t = 1)]
    cost: u64,
    /// A cost reported after the response, `TIME:COST` (e.g. `5s:1200`); repeatable.
    #[arg(long)]
    report_at: Vec<String>,
    /// How long each admitted request runs (e.g. `2s`): its leases are released
    /// then, as Envoy releases them when the stream ends, and its holds on reserved budgets
    /// settled. Without it, none is released or settled.
    #[arg(long)]
    hold: Option<String>,
    /// With --hold: the actual cost each admitted request reports when it ends (settling its
    /// holds; charged plainly where it opened none). Default: its own cost.
    #[arg(long)]
    actual: Option<u64>,
    /// Leave every `reserve` out of the config: budgets are checked at the request (use
    /// --cost 0) and charged --actual at its end, as gateways do without reservations.
    #[arg(long)]
    without_reserve: bool,
    /// Steady traffic, evenly spaced: `20/s`, `100/m`, `5/10s`.
    #[arg(long, default_value = "0/s")]
    rate: String,
    /// Extra requests all at once: `TIME:COUNT`, e.g. `10s:50`; repeatable.
    #[arg(long)]
    burst_at: Vec<String>,
    /// How long to simulate: `60s`, `5m`, ...
    #[arg(long, default_value = "60s")]
    duration: String,
    /// Chart row width in time (default: whole seconds, at most about 60 rows).
    #[arg(long)]
    bucket: Option<String>,
    /// Print every decision as CSV instead of the chart.
    #[arg(long)]
    csv: bool,
}

fn main() -> ExitCode {
    if invoked_as(limitador_cli::NAME) {
        return limitador_server();
    }
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig {
            paths,
            merge_domain_config,
            debt,
            overrides,
        }) => check_config(
            &paths,
            LoadOptions {
                merge_domain_config,
                debt,
                // A file is checked as a server in a region would hold it: a `global` limit is
                // explained with its bounds.
                regions: true,
                ..LoadOptions::default()
            },
            overrides.as_deref(),
        ),
        Some(Command::Serve(args)) => serve(*args),
        Some(Command::Simulate(args)) => run_simulation(&args),
        Some(Command::Replay(args)) => run_replay(&args),
        None => serve(cli.serve),
    }
}

/// Whether the binary was run under the file name `name` (a link to it, as an image that
/// replaces Limitador's provides).
fn invoked_as(name: &str) -> bool {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| path.file_name().map(|f| f == name))
        .unwrap_or(false)
}

/// The binary run as `limitador-server`: Limitador's command line, served by sluice.
fn limitador_server() -> ExitCode {
    let cli = limitador_cli::LimitadorCli::parse();
    match cli.translate() {
        Err(reason) => {
            eprintln!("{}: {reason}", limitador_cli::NAME);
            ExitCode::from(2)
        }
        Ok(limitador_cli::Asked::Validate(path)) => {
            check_config(&[path], LoadOptions::default(), None)
        }
        Ok(limitador_cli::Asked::Serve(flags)) => {
            let sluice = std::iter::once("sluice".to_string()).chain(flags);
            serve(Cli::parse_from(sluice).serve)
        }
    }
}

/// The runtime `serve` runs on (everything but the gRPC port's own threads, when it has them:
/// `server/serving_threads.rs`): tokio's multi-threaded one with every driver, and without its
/// "LIFO slot". That slot runs a task woken by another task next, ahead of the ones queued:
/// when a Redis reply hands out the answers of calls from many gRPC connections, each answer
/// then wakes its connection's task straight away and goes out in a write of its own. Without
/// it, each connection writes the answers of one reply together (0.37 against 0.11 `writev`s
/// a call, and about 15% less CPU a call on Redis; BENCHMARKS.md). Those figures predate each
/// connection's calls running in its own task (`server/connection.rs`), since when the slot
/// measures the same within noise, and the gRPC port's own threads (docs/architecture.md). The switch is in tokio's unstable
/// API, which `.cargo/config.toml` turns on; a build without it keeps the slot.
fn serving_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    #[cfg(tokio_unstable)]
    builder.disable_lifo_slot();
    builder.build()
}

/// `sluice check-config`: the report on stdout, the errors and warnings on stderr, exit 1
/// when the config (or the overrides) is refused.
fn check_config(paths: &[PathBuf], options: LoadOptions, overrides: Option<&Path>) -> ExitCode {
    let report = sluice::check::check(paths, options, overrides);
    print!("{}", report.out);
    eprint!("{}", report.err);
    if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn run_replay(args: &ReplayArgs) -> ExitCode {
    use sluice::replay::{self, Gate, Replay};
    let replay = Replay {
        config: args.config.clone(),
        baseline: (!args.baseline.is_empty()).then(|| args.baseline.clone()),
        recordings: args.recordings.clone(),
        merge_domain_config: args.merge_domain_config,
        without_tickets: args.without_reserve,
        overrides: args.overrides.clone(),
    };
    let report = match replay::run(&replay) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("sluice replay: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(error) => {
                eprintln!("sluice replay: {error}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        let configs: Vec<String> = args
            .config
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        print!("{}", report.text(&configs.join(", ")));
    }
    if let Some(path) = &args.svg {
        if let Err(error) = std::fs::write(path, replay::svg::svg(&report)) {
            eprintln!("sluice replay: {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let gate = Gate {
        overall: args.max_newly_denied,
        per_rule: args.max_newly_denied_per_rule,
    };
    let failures = gate.failures(&report);
    for failure in &failures {
        eprintln!("sluice replay: {failure}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

fn run_simulation(args: &SimulateArgs) -> ExitCode {
    let report = simulation(args).and_then(|s| simulate::run(&s).map_err(|e| e.to_string()));
    match report {
        Ok(report) if args.csv => print!("{}", simulate::chart::csv(&report)),
        Ok(report) => print!("{}", simulate::chart::text(&report)),
        Err(error) => {
            eprintln!("sluice simulate: {error}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// Parses each of `texts` with `parse`, the first error as its message.
fn parse_all<T, E: std::fmt::Display>(
    texts: &[String],
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Vec<T>, String> {
    texts
        .iter()
        .map(|text| parse(text).map_err(|e| e.to_string()))
        .collect()
}

fn simulation(args: &SimulateArgs) -> Result<Simulation, String> {
    let bucket_us = match &args.bucket {
        Some(bucket) => Some(traffic::parse_duration_us(bucket).map_err(|e| e.to_string())?),
        None => None,
    };
    Ok(Simulation {
        config_paths: args.config.clone(),
        load_options: LoadOptions {
            merge_domain_config: args.merge_domain_config,
            debt: args.debt,
            without_tickets: args.without_reserve,
            every_hit: false,
            // One replica simulated: a `global` limit counts as the whole limit there.
            regions: true,
            ..LoadOptions::default()
        },
        domain: args.domain.clone(),
        descriptors: parse_all(&args.descriptor, simulate::parse_descriptor)?,
        together: args.together,
        cost: args.cost,
        reports: parse_all(&args.report_at, traffic::parse_burst)?,
        actual: args.actual,
        hold_us: match &args.hold {
            Some(hold) => Some(traffic::parse_duration_us(hold).map_err(|e| e.to_string())?),
            None => None,
        },
        traffic: Traffic {
            rate: traffic::parse_rate(&args.rate).map_err(|e| e.to_string())?,
            bursts: parse_all(&args.burst_at, traffic::parse_burst)?,
            duration_us: traffic::parse_duration_us(&args.duration).map_err(|e| e.to_string())?,
        },
        bucket_us,
    })
}

fn serve(args: ServeArgs) -> ExitCode {
    let (log_level, log_format) = (
        args.observability.log_level.clone(),
        args.observability.log_format,
    );
    let settings = match args.into_settings() {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sluice: invalid setting: {error}");
            return ExitCode::from(2);
        }
    };
    // Started before the async runtime: the export runs on a thread of its own.
    let export = match settings
        .observability
        .tracing
        .as_ref()
        .map(otel::Export::start)
        .transpose()
    {
        Ok(export) => export,
        Err(error) => {
            eprintln!("sluice: tracing: {error}");
            return ExitCode::from(2);
        }
    };
    init_logging(
        &log_level,
        log_format,
        export.as_ref().map(otel::Export::tracer),
    );
    for (name, why) in sluice_server::settings::ignored_variables() {
        tracing::warn!("{name} is set but ignored: {why}");
    }
    let refused = sluice_server::settings::refused_variables();
    for (name, asks) in &refused {
        eprintln!("sluice: {name} asks for {asks}, which sluice cannot provide yet: unset it (and terminate TLS in front of sluice) rather than run without it");
    }
    if !refused.is_empty() {
        return ExitCode::from(2);
    }
    let runtime = match serving_runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sluice: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let reload = Arc::new(Notify::new());
    let (hangups, shutdown) = {
        let _runtime = runtime.enter();
        (reload_on_sighup(reload.clone()), shutdown_signal())
    };
    runtime.spawn(hangups);
    let served = runtime.block_on(async {
        let listeners = Listeners::bind(&settings).await?;
        server::run(settings, listeners, shutdown, reload).await
    });
    // A config still being parsed on a blocking thread does not hold the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    if let Some(export) = export {
        export.shutdown();
    }
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            eprintln!("sluice: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr at `level`; with `tracer`, the spans of `otel::spans::TARGET` are exported
/// through it, and only there.
fn init_logging(
    level: &str,
    format: LogFormat,
    tracer: Option<opentelemetry_sdk::trace::SdkTracer>,
) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // The spans meant for export never reach the log, whatever the level.
    let filter = match format!("{}=off", otel::spans::TARGET).parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let fmt = match format {
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        LogFormat::Text => fmt.with_filter(filter).boxed(),
    };
    let spans = tracer.map(|tracer| {
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(otel::spans::TARGET, tracing::Level::TRACE),
            )
    });
    tracing_subscriber::registry().with(fmt).with(spans).init();
}

/// Registers for SIGHUP now and returns the task that asks for a config reload on each one.
/// Registering at once, not when the task first runs, means a SIGHUP sent as soon as the
/// ports are announced reloads instead of killing the process (its default action).
fn reload_on_sighup(reload: Arc<Notify>) -> impl std::future::Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let hangups = signal(SignalKind::hangup());
        async move {
            let Ok(mut hangups) = hangups else {
                tracing::warn!(
                    "cannot listen for SIGHUP; config reloads come from file changes only"
                );
                return;
            };
            while hangups.recv().await.is_some() {
                reload.notify_one();
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = reload;
        std::future::ready(())
    }
}

/// Registers for SIGTERM and SIGINT now, and returns what completes on either: a signal sent
/// as soon as the ports are announced drains instead of killing the process.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let terminate = signal(SignalKind::terminate());
        let interrupt = signal(SignalKind::interrupt());
        async move {
            match (terminate, interrupt) {
                (Ok(mut terminate), Ok(mut interrupt)) => {
                    tokio::select! {
                        _ = terminate.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                (Ok(mut only), Err(_)) | (Err(_), Ok(mut only)) => {
                    only.recv().await;
                }
                (Err(_), Err(_)) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
