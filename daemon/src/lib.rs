//! The embeddable daemon: a Styx engine serving your functions over TCP.
//!
//! Register functions on an [`App`] and hand it to [`main`]: you get the
//! TCP protocol, the input log, snapshots, recovery, exactly-once clients,
//! `/metrics` and `/health`, and a cluster mode, with the same settings as
//! `styxd` (`--help` lists them):
//!
//! ```no_run
//! use std::sync::Arc;
//! use styx_engine::App;
//!
//! fn main() -> std::process::ExitCode {
//!     let mut app = App::new("hello");
//!     let greeter = app.operator("greeter", 16);
//!     app.function(greeter, "greet", |ctx, name: String| async move {
//!         let n = ctx.get::<u64>()?.unwrap_or(0) + 1;
//!         ctx.put(&n)?;
//!         Ok(format!("hello {name}, #{n}"))
//!     });
//!     styx_daemon::main(Arc::new(app))
//! }
//! ```
//!
//! Settings come from a TOML file (`--config`), then `STYX_*` environment
//! variables, then flags, each overriding the one before; every setting has
//! an embedded default, so a daemon started alone serves on 127.0.0.1:7400
//! with its data in `./data` ([`settings`]). Before the shards bind, the
//! daemon claims its addresses ([`claim`]); it then recovers, serves, and on
//! SIGTERM or SIGINT stops gracefully ([`serve()`]).
//!
//! A daemon may take flags of its own and do something before recovery: an
//! [`Extension`]. `styxd` is one: it picks a built-in application and
//! preloads a benchmark's state (which is why this crate does not depend on
//! the benchmarks, and a user's daemon does not carry them).
//!
//! Exit status: 0 after a graceful stop, 1 when the daemon cannot serve (an
//! address taken, a damaged data directory), 2 on a bad setting.

#![forbid(unsafe_code)]

pub mod claim;
pub mod cluster_file;
pub mod serve;
pub mod settings;
mod spare;

pub use settings::{Flags, Fsync, LogFormat, SchemaFormat, Settings};

use clap::{CommandFactory, FromArgMatches};
use std::process::ExitCode;
use std::sync::Arc;
use styx_engine::{App, ShardId};
use styx_storage::DataDir;

/// How a daemon names itself: in `--help` and `--version`, in its error
/// messages and in the server name clients see (WELCOME).
#[derive(Clone, Debug)]
pub struct Program {
    pub name: String,
    /// One line for the top of `--help`.
    pub about: String,
    /// Called on a shard's thread after a second without progress (see
    /// `styx_runtime::Options::on_quiet`): where a binary has its
    /// allocator give an idle thread's freed memory back.
    pub on_quiet: Option<fn()>,
    /// Called on a shard's snapshot writer and on the helper thread that
    /// merges a chain of files (see `styx_runtime::Options::on_background`):
    /// where a binary lowers that thread's CPU priority below the shards'.
    pub on_background: Option<fn()>,
}

impl Program {
    /// A daemon serving `app` from the binary at `argv0`: named after the
    /// binary, and saying which application it serves.
    pub fn serving(app: &App, argv0: Option<&str>) -> Program {
        let name = argv0
            .and_then(|a| std::path::Path::new(a).file_name())
            .map_or_else(|| "styx-daemon".to_string(), |n| n.to_string_lossy().into_owned());
        Program {
            about: format!(
                "{name}: a Styx daemon serving the application {:?} (transactional stateful functions over TCP)",
                app.name()
            ),
            name,
            on_quiet: None,
            on_background: None,
        }
    }
}

/// What a daemon adds to the settings every daemon takes: flags of its own
/// (they appear in its `--help` only, after the common ones) and a step
/// before recovery.
pub trait Extension: clap::Args + FromArgMatches {
    /// Runs once the addresses are claimed and the data directory is open,
    /// before recovery; an error stops the daemon (exit 1).
    fn prepare(&self, start: &Start<'_>) -> Result<(), String> {
        let _ = start;
        Ok(())
    }
}

/// No flags of its own, nothing before recovery: the daemon of [`main`].
#[derive(Debug, clap::Args)]
pub struct Plain {}

impl Extension for Plain {}

/// Where a daemon starts, for [`Extension::prepare`].
#[derive(Debug)]
pub struct Start<'a> {
    pub app: &'a Arc<App>,
    pub dir: &'a DataDir,
    /// Shards of the whole engine (every node of a cluster).
    pub shards: u16,
    /// This node's shards, in increasing order (any of the engine's: a
    /// cluster file may place them).
    pub local: Vec<ShardId>,
}

/// The command line: the common flags, then the extension's.
#[derive(Debug, clap::Parser)]
#[command(version, long_about = None)]
struct Cli<E: clap::Args> {
    #[command(flatten)]
    flags: Flags,
    #[command(flatten)]
    extension: E,
}

/// Runs a daemon serving `app` with settings from the command line,
/// environment and settings file; returns when stopped (SIGTERM/SIGINT).
pub fn main(app: Arc<App>) -> ExitCode {
    main_with_args(app, std::env::args().collect())
}

/// [`main`] with explicit command-line arguments (the first is the program).
pub fn main_with_args(app: Arc<App>, args: Vec<String>) -> ExitCode {
    let program = Program::serving(&app, args.first().map(String::as_str));
    match parse::<Plain>(&program, args) {
        Ok((settings, plain)) => serve(&program, app, settings, &plain),
        Err(code) => code,
    }
}

/// Parses the command line (the first argument is the program) into the
/// settings and `E`'s flags. `--help`, `--version` and malformed flags exit
/// here, as clap does; a setting that does not hold is printed and `Err`
/// carries the exit status (2).
pub fn parse<E: Extension>(program: &Program, args: Vec<String>) -> Result<(Settings, E), ExitCode> {
    // clap keeps a command's name for the process's life; a daemon names
    // itself once.
    let name: &'static str = program.name.clone().leak();
    let mut command = Cli::<E>::command()
        .name(name)
        .bin_name(&program.name)
        .about(program.about.clone());
    let cli = command
        .try_get_matches_from_mut(args)
        .and_then(|m| Cli::<E>::from_arg_matches(&m))
        .unwrap_or_else(|e| e.format(&mut command).exit());
    match Settings::resolve(cli.flags) {
        Ok(settings) => Ok((settings, cli.extension)),
        Err(e) => {
            eprintln!("{}: {e}", program.name);
            Err(ExitCode::from(2))
        }
    }
}

/// Logs to stderr as the settings say, serves `app` until stopped (or, with
/// `--schema`, prints its schema and serves nothing), and
/// returns the exit status.
pub fn serve<E: Extension>(program: &Program, app: Arc<App>, settings: Settings, extension: &E) -> ExitCode {
    match settings.schema {
        Some(SchemaFormat::Text) => {
            print!("{}", app.schema());
            return ExitCode::SUCCESS;
        }
        Some(SchemaFormat::Json) => {
            println!("{}", app.schema().to_json());
            return ExitCode::SUCCESS;
        }
        None => {}
    }
    let filter = tracing_subscriber::EnvFilter::new(&settings.log);
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.log_format {
        // Colour codes only for a person at a terminal, never into a file.
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
    match serve::run(program, app, settings, extension) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("{}: {e}", program.name);
            ExitCode::FAILURE
        }
    }
}
