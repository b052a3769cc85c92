//! The `rebuno-dev` terminal front end, like the Go kernel's CLI: [`parse()`] reads the command
//! line, [`execute`] runs a client command against a kernel over HTTP and maps [`run`]'s
//! outcome to the exit status. The full help, exit statuses included, is [`USAGE`].

// The help texts every usage shares, as literals for `concat!`; defined before the modules
// so theirs can use them too.
macro_rules! client_options_help {
    () => {
        "

client options (any position: before or after the command group, or after the
command's own arguments; --url=URL works as well as --url URL):
  --url URL             kernel URL (env REBUNO_URL, default http://127.0.0.1:8080)
  --token TOKEN         bearer token or API key (env REBUNO_API_KEY)
  -h, --help            show help (`rebuno-dev help exec|approvals` for a group)"
    };
}

macro_rules! exit_status_help {
    () => {
        "

exit status:
  0  success
  1  the command failed: the kernel answered an error or could not be reached,
     a watched execution (exec create --watch) did not complete, or the kernel
     could not be served (bad manifest, address in use)
  2  usage error: unknown command or option, missing or bad value, or an option
     given to the wrong command (serving options to a client command, or client
     options to serving)"
    };
}

mod approvals;
mod args;
mod client;
mod exec;
mod parse;
mod serve;
mod timeline;
mod watch;

use std::io::Write;

pub(crate) use approvals::ApprovalsCommand;
pub(crate) use client::Connection;
pub(crate) use exec::ExecCommand;
pub(crate) use parse::{parse, usage_for};
pub(crate) use serve::ServeArgs;

/// Default kernel URL of client commands.
pub(crate) const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Top-level usage.
pub(crate) const USAGE: &str = concat!(
    "\
usage:
  rebuno-dev [serve] [--config FILE] [--addr HOST:PORT] [--data-dir DIR]
                        serve the in-memory kernel (the default command)
  rebuno-dev [client options] exec <create|list|get|events|timeline|export|cancel|redeliver> ...
                        create, follow and inspect executions (create --watch
                        prints the id and status, then each event as it happens;
                        the output is in the last, execution.completed);
                        redeliver ID delivers a running one again now, as a
                        lease expiry does, to try replay against any host
  rebuno-dev [client options] approvals <list|grant|deny> ...
                        decide the steps a policy holds for approval
  rebuno-dev help [exec|approvals]

serving options (serving only):
  -c, --config FILE     provisioning manifest: the agents to register
  -a, --addr HOST:PORT  listen address (default 127.0.0.1:8080)
  -d, --data-dir DIR    keep the event log in DIR and resume from it on start
                        (default: in memory)
  --dispatch-max-attempts N
                        delivery attempts of a dispatch before the execution
                        fails dispatch_exhausted; a lease expiry uses one too
                        (env REBUNO_DISPATCH_MAX_ATTEMPTS, default 5)
  --dispatch-base-delay DURATION
                        first retry delay, doubling per attempt (Go duration:
                        500ms, 2s; env REBUNO_DISPATCH_BASE_DELAY, default 1s)
  --dispatch-max-delay DURATION
                        largest retry delay, before up to 25% jitter
                        (env REBUNO_DISPATCH_MAX_DELAY, default 30s)
                        flags win over the environment, the environment over
                        the manifest's dispatch_max_attempts, dispatch_base_delay
                        and dispatch_max_delay. With the defaults, a run whose
                        agent went away is delivered again when its lease
                        expires, then retried for 2+4+8 = 14s more

serving environment:
  REBUNO_BEARER_TOKEN          require this token from clients
  REBUNO_DISPATCH_CONCURRENCY  webhook deliveries in flight at once (default 8)
  REBUNO_DISPATCH_MAX_ATTEMPTS, REBUNO_DISPATCH_BASE_DELAY, REBUNO_DISPATCH_MAX_DELAY
                               delivery retries (see the --dispatch-* options)
  REBUNO_RETENTION             how long ended executions are kept, as a Go
                               duration (default 24h; 0 keeps everything)
  RUST_LOG                     the log filter (default info)",
    client_options_help!(),
    exit_status_help!()
);

/// Errors of the terminal front end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CliError {
    /// Bad command line (exit status 2).
    #[error("{0}")]
    Usage(String),
    /// The kernel could not be reached: not running, wrong URL, or no answer in time.
    #[error(
        "could not reach the kernel at {url}: {}; is rebuno-dev running? (set --url or REBUNO_URL)",
        root_cause(.source)
    )]
    Http {
        /// The kernel's base URL.
        url: String,
        /// The SDK's network error, with the socket's error as its innermost cause.
        source: rebuno::Error,
    },
    /// The kernel could not be reached by a request the SDK's client does not make (the
    /// dev-only route of `exec redeliver`), or its answer could not be read.
    #[error(
        "could not reach the kernel at {url}: {}; is rebuno-dev running? (set --url or REBUNO_URL)",
        root_cause(.source.as_ref())
    )]
    Unreachable {
        /// The kernel's base URL.
        url: String,
        /// The HTTP client's error (without the URL), with the socket's as its innermost cause.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The kernel answered with an error (4xx/5xx) and its envelope's code and message.
    #[error("{}", api_text(*.status, .code, .message))]
    Api {
        /// HTTP status.
        status: u16,
        /// Envelope `code` (the SDK names an answer without an envelope `internal_error`).
        code: String,
        /// Envelope `message` (the body of an answer without an envelope, trimmed).
        message: String,
    },
    /// `exec create` named an agent the kernel does not know.
    #[error("{}", unknown_agent_text(.agent, .url, .registered.as_deref()))]
    UnknownAgent {
        /// The agent id given.
        agent: String,
        /// The kernel's base URL.
        url: String,
        /// The agents the kernel knows (`None` when it would not list them).
        registered: Option<Vec<String>>,
    },
    /// Any other failure of the SDK client: it could not be built (a bad URL or token), or
    /// the kernel's answer could not be read.
    #[error("{}", with_cause(.0))]
    Sdk(rebuno::Error),
    /// Output could not be written.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// The process exit status of this error: 2 for [`CliError::Usage`], 1 otherwise.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// The innermost cause of `error`: `Connection refused (os error 111)` rather than the
/// transport's `could not connect`.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// `error: its innermost cause`, or only `error` when it has no other cause.
fn with_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let (text, cause) = (error.to_string(), root_cause(error));
    if cause == text {
        text
    } else {
        format!("{text}: {cause}")
    }
}

fn api_text(status: u16, code: &str, message: &str) -> String {
    let hint = match status {
        401 => "; set --token or REBUNO_API_KEY",
        _ => "",
    };
    format!("kernel answered {status} {code}: {message}{hint}")
}

fn unknown_agent_text(agent: &str, url: &str, registered: Option<&[String]>) -> String {
    let known = match registered {
        Some([]) => " (no agents registered)".to_owned(),
        Some(ids) => format!(" (registered: {})", ids.join(", ")),
        None => String::new(),
    };
    format!(
        "agent {agent:?} is not registered with the kernel at {url}{known}; add it to the \
         manifest (--config) or POST /v0/agents"
    )
}

/// How a client command ended, mapped to the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1 (a watched execution did not complete).
    Failure,
}

impl Outcome {
    /// The process exit status.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
        }
    }
}

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
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

/// Runs a client command (or prints help), writing its output to `out`.
///
/// # Errors
///
/// Transport and API errors, or [`CliError::Usage`] for [`Command::Serve`], which only the
/// binary runs.
pub(crate) async fn run(
    command: Command,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    match command {
        Command::Help(text) => {
            writeln!(out, "{text}")?;
            Ok(Outcome::Success)
        }
        Command::Exec {
            connection,
            command,
        } => exec::run(&client::Remote::connect(&connection)?, command, out).await,
        Command::Approvals {
            connection,
            command,
        } => approvals::run(&client::Remote::connect(&connection)?, command, out).await,
        Command::Serve(_) => Err(CliError::Usage(
            "serve is run by the rebuno-dev binary".to_owned(),
        )),
    }
}

/// Runs `command` as the binary does after parsing: writes its output to `out` and an error to
/// `err` as `rebuno-dev: <message>`, and returns the exit status (see [`USAGE`]).
pub(crate) async fn execute(
    command: Command,
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> u8 {
    match run(command, out).await {
        Ok(outcome) => outcome.exit_code(),
        Err(error) => {
            // Nothing is left to report a failing stderr to.
            if writeln!(err, "rebuno-dev: {error}").is_err() {
                tracing::error!(%error, "cannot write to stderr");
            }
            error.exit_code()
        }
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

    fn unknown(registered: Option<&[&str]>) -> String {
        CliError::UnknownAgent {
            agent: "helo".into(),
            url: DEFAULT_URL.into(),
            registered: registered.map(|ids| ids.iter().map(|id| (*id).to_owned()).collect()),
        }
        .to_string()
    }

    #[test]
    fn an_unknown_agent_names_itself_the_kernel_and_the_way_out() {
        assert_eq!(
            unknown(Some(&["hello", "other"])),
            "agent \"helo\" is not registered with the kernel at http://127.0.0.1:8080 \
             (registered: hello, other); add it to the manifest (--config) or POST /v0/agents"
        );
        assert!(unknown(Some(&[])).contains(" (no agents registered); "));
        assert_eq!(
            unknown(None),
            "agent \"helo\" is not registered with the kernel at http://127.0.0.1:8080; \
             add it to the manifest (--config) or POST /v0/agents"
        );
    }

    /// The commands a group's help lists under `commands:`.
    fn commands_of(group_usage: &str) -> Vec<&str> {
        let listed = group_usage
            .split("commands:\n")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_default();
        listed
            .lines()
            .filter_map(|line| line.strip_prefix("  "))
            .filter(|line| !line.starts_with(' '))
            .filter_map(|line| line.split_whitespace().next())
            .collect()
    }

    #[test]
    fn the_top_level_help_lists_every_command_and_the_serving_environment() {
        let exec = commands_of(exec::USAGE);
        assert!(
            exec.contains(&"timeline") && exec.contains(&"export"),
            "{exec:?}"
        );
        let listed = format!("exec <{}>", exec.join("|"));
        assert!(
            USAGE.contains(&listed),
            "top-level help lacks {listed}:\n{USAGE}"
        );
        let approvals = format!("approvals <{}>", commands_of(approvals::USAGE).join("|"));
        assert!(
            USAGE.contains(&approvals),
            "top-level help lacks {approvals}"
        );
        for variable in [
            "REBUNO_BEARER_TOKEN",
            "REBUNO_DISPATCH_CONCURRENCY",
            "REBUNO_DISPATCH_MAX_ATTEMPTS",
            "REBUNO_DISPATCH_BASE_DELAY",
            "REBUNO_DISPATCH_MAX_DELAY",
            "REBUNO_RETENTION",
            "RUST_LOG",
            "--dispatch-max-attempts N",
            "--dispatch-base-delay DURATION",
            "--dispatch-max-delay DURATION",
            "dispatch_max_attempts",
        ] {
            assert!(USAGE.contains(variable), "top-level help lacks {variable}");
        }
        assert!(
            USAGE.contains("each event as it happens"),
            "what --watch prints"
        );
    }

    #[tokio::test]
    async fn exit_statuses_match_the_help() {
        assert!(USAGE.contains("  0  success\n  1  the command failed"));
        assert!(USAGE.contains("  2  usage error"));
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(
            CliError::UnknownAgent {
                agent: "a".into(),
                url: DEFAULT_URL.into(),
                registered: None
            }
            .exit_code(),
            1
        );
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(execute(Command::Help(USAGE), &mut out, &mut err).await, 0);
        assert!(out.starts_with(b"usage:") && err.is_empty());
        let serve = parse_words(&[], &[]).unwrap();
        assert_eq!(execute(serve, &mut out, &mut err).await, 2);
        assert!(err.starts_with(b"rebuno-dev: serve is run by the rebuno-dev binary"));
    }
}
