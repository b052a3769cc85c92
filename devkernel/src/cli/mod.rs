//! The `rebuno-dev` terminal front end: `serve` (the default) and client commands that talk
//! to a running kernel over HTTP, like the Go kernel's CLI.
//!
//! ```text
//! rebuno-dev [--config FILE] [--addr HOST:PORT]          serve the in-memory kernel
//! rebuno-dev exec create <agent> ['<json>'] [--session S] [--watch]
//! rebuno-dev exec list|get|events|cancel ...
//! rebuno-dev approvals list|grant|deny ...
//! ```
//!
//! Client commands take `--url` (or `REBUNO_URL`, default `http://127.0.0.1:8080`) and
//! `--token` (or `REBUNO_API_KEY`). The binary parses with [`parse`] and runs client
//! commands with [`run`]; tests drive the same functions.
//!
//! ```
//! use rebuno_devkernel::cli::{Command, parse};
//! let args = ["exec", "get", "0192f1a0-0000-7000-8000-000000000000", "--url", "http://k:1"];
//! let command = parse(args.map(String::from).to_vec(), |_| None).unwrap();
//! assert!(matches!(command, Command::Exec { .. }));
//! ```

mod approvals;
mod args;
mod client;
mod exec;
mod serve;
mod watch;

use std::io::Write;

pub use approvals::ApprovalsCommand;
pub use client::Connection;
pub use exec::ExecCommand;
pub use serve::ServeArgs;

/// Default kernel URL of client commands.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Top-level usage.
pub const USAGE: &str = "\
usage:
  rebuno-dev [--config FILE] [--addr HOST:PORT]
                        serve the in-memory kernel (default 127.0.0.1:8080);
                        REBUNO_BEARER_TOKEN requires that token from clients
  rebuno-dev exec <create|list|get|events|cancel> ...
  rebuno-dev approvals <list|grant|deny> ...

client options (any position):
  --url URL             kernel URL (env REBUNO_URL, default http://127.0.0.1:8080)
  --token TOKEN         bearer token or API key (env REBUNO_API_KEY)
  -h, --help            show help (also after a command group)";

/// Errors of the terminal front end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Bad command line.
    #[error("{0}")]
    Usage(String),
    /// The kernel could not be reached.
    #[error("request to {url} failed: {source}")]
    Http {
        /// The URL.
        url: String,
        /// The cause.
        source: reqwest::Error,
    },
    /// The kernel answered with an error envelope.
    #[error("kernel answered {status} {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Envelope `code`.
        code: String,
        /// Envelope `message`.
        message: String,
    },
    /// The SDK client failed (the live delta stream).
    #[error("{0}")]
    Sdk(#[from] rebuno::Error),
    /// Output could not be written.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

/// How a client command ended, mapped to the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1 (a watched execution did not complete).
    Failure,
}

impl Outcome {
    /// The process exit status.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
        }
    }
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Serve the kernel (the default).
    Serve(ServeArgs),
    /// `exec ...`.
    Exec {
        /// Where the kernel is.
        connection: Connection,
        /// What to do.
        command: ExecCommand,
    },
    /// `approvals ...`.
    Approvals {
        /// Where the kernel is.
        connection: Connection,
        /// What to do.
        command: ApprovalsCommand,
    },
    /// Print this help text and exit 0.
    Help(&'static str),
}

/// Removes `--url` / `--token` from `args` and resolves the connection (flag, then
/// environment, then default).
fn take_connection(
    args: &mut Vec<String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Connection, CliError> {
    let mut url = None;
    let mut token = None;
    let mut kept = Vec::with_capacity(args.len());
    let mut rest = std::mem::take(args).into_iter();
    while let Some(arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg.clone(), None),
        };
        let slot = match flag.as_str() {
            "--url" => &mut url,
            "--token" => &mut token,
            "--" => {
                kept.push(arg);
                kept.extend(rest.by_ref());
                break;
            }
            _ => {
                kept.push(arg);
                continue;
            }
        };
        let value = inline
            .or_else(|| rest.next())
            .ok_or_else(|| CliError::Usage(format!("{flag} needs a value")))?;
        *slot = Some(value);
    }
    *args = kept;
    Ok(Connection {
        url: url
            .or_else(|| env("REBUNO_URL"))
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_owned()),
        token: token
            .or_else(|| env("REBUNO_API_KEY"))
            .filter(|t| !t.is_empty()),
    })
}

/// The usage text for the command group `args` start with (top-level otherwise).
pub fn usage_for(args: &[String]) -> &'static str {
    match args.first().map(String::as_str) {
        Some("exec") => exec::USAGE,
        Some("approvals") => approvals::USAGE,
        _ => USAGE,
    }
}

fn wants_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "-h")
}

/// Parses the arguments after the program name; `env` reads environment variables.
///
/// # Errors
///
/// [`CliError::Usage`] for unknown commands or options, missing values or bad JSON input.
pub fn parse(args: Vec<String>, env: impl Fn(&str) -> Option<String>) -> Result<Command, CliError> {
    let group = args.first().map(String::as_str);
    match group {
        Some("exec") => {
            if wants_help(&args) {
                return Ok(Command::Help(exec::USAGE));
            }
            let mut rest = args[1..].to_vec();
            let connection = take_connection(&mut rest, &env)?;
            Ok(Command::Exec {
                connection,
                command: exec::parse(&rest)?,
            })
        }
        Some("approvals") => {
            if wants_help(&args) {
                return Ok(Command::Help(approvals::USAGE));
            }
            let mut rest = args[1..].to_vec();
            let connection = take_connection(&mut rest, &env)?;
            Ok(Command::Approvals {
                connection,
                command: approvals::parse(&rest)?,
            })
        }
        Some("help") => Ok(Command::Help(USAGE)),
        Some("serve") => parse_serve(&args[1..]),
        _ => parse_serve(&args),
    }
}

fn parse_serve(args: &[String]) -> Result<Command, CliError> {
    if wants_help(args) {
        return Ok(Command::Help(USAGE));
    }
    Ok(Command::Serve(serve::parse(args)?))
}

/// Runs a client command (or prints help), writing its output to `out`.
///
/// # Errors
///
/// Transport and API errors, or [`CliError::Usage`] for [`Command::Serve`], which only the
/// binary runs.
pub async fn run(command: Command, out: &mut (dyn Write + Send)) -> Result<Outcome, CliError> {
    match command {
        Command::Help(text) => {
            writeln!(out, "{text}")?;
            Ok(Outcome::Success)
        }
        Command::Exec {
            connection,
            command,
        } => exec::run(&client::Client::new(&connection)?, command, out).await,
        Command::Approvals {
            connection,
            command,
        } => approvals::run(&client::Client::new(&connection)?, command, out).await,
        Command::Serve(_) => Err(CliError::Usage(
            "serve is run by the rebuno-dev binary".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &[&str], env: &[(&str, &str)]) -> Result<Command, CliError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse(words.iter().map(|s| (*s).to_owned()).collect(), move |k| {
            env.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn serve_is_the_default() {
        let Command::Serve(args) = parse_words(&[], &[]).unwrap() else {
            panic!("not serve");
        };
        assert_eq!(args.addr.to_string(), "127.0.0.1:8080");
        let Command::Serve(args) =
            parse_words(&["--config", "dev.yaml", "--addr=0.0.0.0:9000"], &[]).unwrap()
        else {
            panic!("not serve");
        };
        assert_eq!(args.config.unwrap().to_str(), Some("dev.yaml"));
        assert_eq!(args.addr.to_string(), "0.0.0.0:9000");
        assert!(parse_words(&["--bogus"], &[]).is_err());
        assert!(parse_words(&["--addr"], &[]).is_err());
        assert!(parse_words(&["--addr", "nope"], &[]).is_err());
        assert_eq!(parse_words(&["--help"], &[]).unwrap(), Command::Help(USAGE));
    }

    #[test]
    fn connection_precedence() {
        let command = parse_words(&["exec", "get", "x"], &[]).unwrap();
        let Command::Exec { connection, .. } = command else {
            panic!("not exec");
        };
        assert_eq!(connection.url, DEFAULT_URL);
        assert_eq!(connection.token, None);
        let env = [("REBUNO_URL", "http://env:1"), ("REBUNO_API_KEY", "k")];
        let Command::Exec { connection, .. } = parse_words(&["exec", "get", "x"], &env).unwrap()
        else {
            panic!("not exec");
        };
        assert_eq!(
            connection,
            Connection {
                url: "http://env:1".into(),
                token: Some("k".into())
            }
        );
        let words = ["approvals", "--url=http://flag:2", "list", "--token", "t"];
        let Command::Approvals {
            connection,
            command,
        } = parse_words(&words, &env).unwrap()
        else {
            panic!("not approvals");
        };
        assert_eq!(connection.url, "http://flag:2");
        assert_eq!(connection.token.as_deref(), Some("t"));
        assert_eq!(command, ApprovalsCommand::List { status: None });
        assert!(parse_words(&["exec", "get", "x", "--url"], &[]).is_err());
    }

    #[test]
    fn help_per_group() {
        assert_eq!(
            parse_words(&["exec", "create", "--help"], &[]).unwrap(),
            Command::Help(exec::USAGE)
        );
        assert_eq!(
            parse_words(&["approvals", "-h"], &[]).unwrap(),
            Command::Help(approvals::USAGE)
        );
        assert!(parse_words(&["exec"], &[]).is_err());
        assert_eq!(Outcome::Failure.exit_code(), 1);
    }
}
