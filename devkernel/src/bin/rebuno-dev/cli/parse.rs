//! The top-level command line: client options (`--url`, `--token`) in any position, the
//! command group, and the serving options, which only serving takes.

use super::{
    ApprovalsCommand, CliError, Command, Connection, DEFAULT_URL, ExecCommand, USAGE, approvals,
    exec, serve,
};

/// Client options: they take a value and go in any position of a client command.
const CLIENT_FLAGS: &[&str] = &["--url", "--token"];

/// Serving options: they take a value and only serving accepts them.
const SERVE_FLAGS: &[&str] = serve::FLAGS;

/// The client options given on the command line, before the environment and defaults apply.
#[derive(Debug, Default)]
struct ClientOptions {
    url: Option<String>,
    token: Option<String>,
    /// The first client option given, as written (without `=value`), for error messages.
    first: Option<String>,
}

impl ClientOptions {
    /// The connection: flag, then environment, then default.
    fn resolve(self, env: &impl Fn(&str) -> Option<String>) -> Result<Connection, CliError> {
        let (url, source) = match self.url {
            Some(url) => (url, "--url"),
            None => match env("REBUNO_URL").filter(|u| !u.is_empty()) {
                Some(url) => (url, "REBUNO_URL"),
                None => (DEFAULT_URL.to_owned(), "the default URL"),
            },
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(CliError::Usage(format!(
                "{source} {url:?} is not an http:// or https:// URL"
            )));
        }
        let token = self
            .token
            .or_else(|| env("REBUNO_API_KEY"))
            .filter(|t| !t.is_empty());
        Ok(Connection { url, token })
    }
}

/// `--flag` and its inline value of `--flag=value`.
fn split_flag(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') => (flag, Some(value)),
        _ => (arg, None),
    }
}

/// Removes the client options from `args` (up to `--`) and returns them.
fn take_client_options(args: &mut Vec<String>) -> Result<ClientOptions, CliError> {
    let mut options = ClientOptions::default();
    let mut kept = Vec::with_capacity(args.len());
    let mut rest = std::mem::take(args).into_iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            kept.push(arg);
            kept.extend(rest.by_ref());
            break;
        }
        let (flag, inline) = split_flag(&arg);
        if !CLIENT_FLAGS.contains(&flag) {
            kept.push(arg);
            continue;
        }
        let value = match inline {
            Some(value) => value.to_owned(),
            None => rest
                .next()
                .filter(|next| !next.starts_with("--"))
                .ok_or_else(|| CliError::Usage(format!("{flag} needs a value")))?,
        };
        options.first.get_or_insert_with(|| flag.to_owned());
        if flag == "--url" {
            options.url = Some(value);
        } else {
            options.token = Some(value);
        }
    }
    *args = kept;
    Ok(options)
}

/// The index of the command group: the first word that is neither an option nor the value of
/// one (`None` when there is none before `--`).
fn group_index(args: &[String]) -> Option<usize> {
    let mut index = 0;
    while let Some(arg) = args.get(index) {
        if arg == "--" {
            return None;
        }
        if !arg.starts_with('-') {
            return Some(index);
        }
        if CLIENT_FLAGS.contains(&arg.as_str()) || SERVE_FLAGS.contains(&arg.as_str()) {
            index += 1;
        }
        index += 1;
    }
    None
}

/// The usage text for the command group of `args` (top-level otherwise); `help GROUP` is
/// that group's.
pub(crate) fn usage_for(args: &[String]) -> &'static str {
    let group = |from: usize| {
        let rest = args.get(from..).unwrap_or_default();
        group_index(rest).map(|i| (from + i, rest[i].as_str()))
    };
    let named = match group(0) {
        Some((index, "help")) => group(index + 1),
        found => found,
    };
    group_usage(named.map(|(_, name)| name)).unwrap_or(USAGE)
}

/// The usage of a client command group.
fn group_usage(group: Option<&str>) -> Option<&'static str> {
    match group {
        Some("exec") => Some(exec::USAGE),
        Some("approvals") => Some(approvals::USAGE),
        _ => None,
    }
}

fn wants_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--help" || a == "-h")
}

/// The error for a client option given while serving.
fn client_option_while_serving(flag: &str) -> CliError {
    let hint = match flag {
        "--token" => "to require a token from clients, set REBUNO_BEARER_TOKEN",
        _ => "to choose where the kernel listens, use --addr HOST:PORT",
    };
    CliError::Usage(format!(
        "{flag} is a client option (for the exec and approvals commands), not a serving \
         option; {hint}"
    ))
}

/// The first serving option in `args` (up to `--`), as written.
fn first_serve_option(args: &[String]) -> Option<&str> {
    args.iter()
        .take_while(|a| *a != "--")
        .map(|a| split_flag(a).0)
        .find(|flag| SERVE_FLAGS.contains(flag))
}

/// The error for a serving option given to the client command `group`.
fn serve_option_for_client(flag: &str, group: &str) -> CliError {
    let (name, value, hint) = match flag {
        "--addr" | "-a" => (
            "--addr",
            "HOST:PORT",
            "to reach a kernel elsewhere, use --url URL (or REBUNO_URL)",
        ),
        "--data-dir" | "-d" => (
            "--data-dir",
            "DIR",
            "a client reads whatever the kernel at --url keeps",
        ),
        "--dispatch-max-attempts" | "--dispatch-base-delay" | "--dispatch-max-delay" => (
            flag,
            if flag.ends_with("attempts") {
                "N"
            } else {
                "DURATION"
            },
            "deliveries are retried as the kernel at --url was served",
        ),
        _ => (
            "--config",
            "FILE",
            "to add an agent to a running kernel, POST /v0/agents",
        ),
    };
    let spelled = if flag == name {
        flag.to_owned()
    } else {
        format!("{flag} ({name})")
    };
    CliError::Usage(format!(
        "{spelled} is a serving option (rebuno-dev [serve] {name} {value}), not an option of \
         `rebuno-dev {group}`; {hint}"
    ))
}

/// Parses the arguments after the program name; `env` reads environment variables.
///
/// Client options go in any position of a client command: before the command group, after
/// it, or after the command's own arguments; serving options only go with serving.
///
/// # Errors
///
/// [`CliError::Usage`] for unknown commands or options, missing values, options given to the
/// wrong command, or bad JSON input.
pub(crate) fn parse(
    args: Vec<String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, CliError> {
    let mut words = args;
    let client = take_client_options(&mut words)?;
    let Some(index) = group_index(&words) else {
        return parse_serve(&words, &client, &env);
    };
    let (front, group, back) = (&words[..index], words[index].as_str(), &words[index + 1..]);
    match group {
        "exec" | "approvals" => parse_client(group, &words, front, back, client, &env),
        "help" => Ok(Command::Help(
            group_usage(back.first().map(String::as_str)).unwrap_or(USAGE),
        )),
        "serve" => parse_serve(&[front, back].concat(), &client, &env),
        other => Err(CliError::Usage(format!(
            "unknown command {other:?} (expected exec, approvals, serve or help)"
        ))),
    }
}

/// Parses a client command group: `front` are the words before the group, `back` after it.
fn parse_client(
    group: &str,
    words: &[String],
    front: &[String],
    back: &[String],
    client: ClientOptions,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Command, CliError> {
    if wants_help(words) {
        return Ok(Command::Help(group_usage(Some(group)).unwrap_or(USAGE)));
    }
    if let Some(flag) = first_serve_option(words) {
        return Err(serve_option_for_client(flag, group));
    }
    if let Some(extra) = front.first() {
        return Err(CliError::Usage(format!(
            "unknown option {extra:?} before {group:?}"
        )));
    }
    let connection = client.resolve(env)?;
    if group == "exec" {
        let command: ExecCommand = exec::parse(back)?;
        return Ok(Command::Exec {
            connection,
            command,
        });
    }
    let command: ApprovalsCommand = approvals::parse(back)?;
    Ok(Command::Approvals {
        connection,
        command,
    })
}

/// Parses serving: no client option may be among `args`.
fn parse_serve(
    args: &[String],
    client: &ClientOptions,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Command, CliError> {
    if wants_help(args) {
        return Ok(Command::Help(USAGE));
    }
    if let Some(flag) = &client.first {
        return Err(client_option_while_serving(flag));
    }
    Ok(Command::Serve(serve::parse(args, env)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| (*s).to_owned()).collect()
    }

    fn parse_words(args: &[&str]) -> Result<Command, CliError> {
        parse(words(args), |_| None)
    }

    fn usage_error(args: &[&str]) -> String {
        match parse_words(args) {
            Err(CliError::Usage(message)) => message,
            other => panic!("{args:?}: expected a usage error, got {other:?}"),
        }
    }

    /// The connection and command of a client command line.
    fn exec(args: &[&str]) -> (Connection, ExecCommand) {
        match parse_words(args) {
            Ok(Command::Exec {
                connection,
                command,
            }) => (connection, command),
            other => panic!("{args:?}: expected exec, got {other:?}"),
        }
    }

    const URL: &str = "http://k:9";

    #[test]
    fn url_in_every_position() {
        let list = ExecCommand::List {
            agent: None,
            status: None,
            session: None,
            limit: None,
        };
        for args in [
            &["--url", URL, "exec", "list"][..],
            &["--url=http://k:9", "exec", "list"],
            &["exec", "--url", URL, "list"],
            &["exec", "--url=http://k:9", "list"],
            &["exec", "list", "--url", URL],
            &["exec", "list", "--url=http://k:9"],
        ] {
            let (connection, command) = exec(args);
            assert_eq!(connection.url, URL, "{args:?}");
            assert_eq!(connection.token, None, "{args:?}");
            assert_eq!(command, list, "{args:?}");
        }
    }

    #[test]
    fn url_and_token_around_a_create() {
        let create = ExecCommand::Create {
            agent: "hello".into(),
            input: Some(serde_json::json!("Ada")),
            session: None,
            watch: true,
        };
        for args in [
            &[
                "--url", URL, "--token", "t", "exec", "create", "hello", "\"Ada\"", "-w",
            ][..],
            &[
                "--token=t",
                "exec",
                "--url",
                URL,
                "create",
                "hello",
                "\"Ada\"",
                "-w",
            ],
            &[
                "exec", "--token", "t", "create", "hello", "--url", URL, "\"Ada\"", "-w",
            ],
            &[
                "exec", "create", "hello", "\"Ada\"", "-w", "--url", URL, "--token", "t",
            ],
            &[
                "exec",
                "create",
                "hello",
                "\"Ada\"",
                "--url=http://k:9",
                "-w",
                "--token=t",
            ],
        ] {
            let (connection, command) = exec(args);
            assert_eq!(connection.url, URL, "{args:?}");
            assert_eq!(connection.token.as_deref(), Some("t"), "{args:?}");
            assert_eq!(command, create, "{args:?}");
        }
    }

    #[test]
    fn approvals_take_client_options_anywhere() {
        for args in [
            &["--url", URL, "approvals", "list", "--token", "t"][..],
            &["approvals", "--token=t", "list", "--url", URL],
        ] {
            let Ok(Command::Approvals {
                connection,
                command,
            }) = parse_words(args)
            else {
                panic!("{args:?}: not approvals");
            };
            assert_eq!(connection.url, URL);
            assert_eq!(connection.token.as_deref(), Some("t"));
            assert_eq!(command, ApprovalsCommand::List { status: None });
        }
    }

    #[test]
    fn the_last_url_wins_and_flags_beat_the_environment() {
        let (connection, _) = exec(&["--url", "http://a:1", "exec", "list", "--url", URL]);
        assert_eq!(connection.url, URL);
        let env = |name: &str| match name {
            "REBUNO_URL" => Some("http://env:1".to_owned()),
            "REBUNO_API_KEY" => Some("k".to_owned()),
            _ => None,
        };
        let Ok(Command::Exec { connection, .. }) = parse(words(&["exec", "list"]), env) else {
            panic!("not exec");
        };
        assert_eq!(connection.url, "http://env:1");
        assert_eq!(connection.token.as_deref(), Some("k"));
        let args = words(&["exec", "list", "--url", URL, "--token", "t"]);
        let Ok(Command::Exec { connection, .. }) = parse(args, env) else {
            panic!("not exec");
        };
        assert_eq!(connection.url, URL);
        assert_eq!(connection.token.as_deref(), Some("t"));
    }

    #[test]
    fn client_options_need_values_and_urls() {
        assert_eq!(
            usage_error(&["exec", "list", "--url"]),
            "--url needs a value"
        );
        // A client option takes the next word, even a command group.
        let message = usage_error(&["--token", "exec", "list"]);
        assert!(message.starts_with("unknown command \"list\""), "{message}");
        assert_eq!(
            usage_error(&["exec", "list", "--url", "--token", "t"]),
            "--url needs a value"
        );
        let message = usage_error(&["exec", "list", "--url", "127.0.0.1:8080"]);
        assert!(
            message.contains("not an http:// or https:// URL"),
            "{message}"
        );
        let env = |name: &str| (name == "REBUNO_URL").then(|| "nope".to_owned());
        let Err(CliError::Usage(message)) = parse(words(&["exec", "list"]), env) else {
            panic!("a bad REBUNO_URL is a usage error");
        };
        assert!(message.starts_with("REBUNO_URL \"nope\""), "{message}");
    }

    #[test]
    fn client_options_are_refused_while_serving() {
        for (args, flag) in [
            (&["--url", URL][..], "--url"),
            (&["--config", "m.yaml", "--url=http://k:9"], "--url"),
            (&["serve", "--token", "t"], "--token"),
            (&["--addr", "127.0.0.1:1", "serve", "--url", URL], "--url"),
        ] {
            let message = usage_error(args);
            assert!(
                message.starts_with(&format!("{flag} is a client option")),
                "{args:?}: {message}"
            );
            assert!(message.contains("not a serving option"), "{message}");
        }
        assert!(usage_error(&["--token", "t"]).contains("REBUNO_BEARER_TOKEN"));
        assert!(usage_error(&["--url", URL]).contains("--addr HOST:PORT"));
    }

    #[test]
    fn serve_options_are_refused_by_client_commands() {
        for (args, spelled, group) in [
            (
                &["--config", "m.yaml", "exec", "list"][..],
                "--config",
                "exec",
            ),
            (&["exec", "list", "--addr=127.0.0.1:1"], "--addr", "exec"),
            (
                &["exec", "create", "hello", "-c", "m.yaml"],
                "-c (--config)",
                "exec",
            ),
            (
                &["approvals", "-a", "x", "list"],
                "-a (--addr)",
                "approvals",
            ),
            (&["exec", "list", "-d", "/tmp/k"], "-d (--data-dir)", "exec"),
        ] {
            let message = usage_error(args);
            assert!(
                message.starts_with(&format!("{spelled} is a serving option")),
                "{args:?}: {message}"
            );
            assert!(
                message.contains(&format!("not an option of `rebuno-dev {group}`")),
                "{message}"
            );
        }
        assert!(usage_error(&["exec", "list", "--addr", "x"]).contains("--url URL"));
    }

    #[test]
    fn the_data_dir_is_a_serving_option_without_serve() {
        for args in [
            &["--data-dir", "/tmp/k"][..],
            &["-d", "/tmp/k"],
            &["serve", "-d=/tmp/k"],
        ] {
            let Ok(Command::Serve(serve)) = parse_words(args) else {
                panic!("{args:?} is not serving");
            };
            assert_eq!(
                serve.data_dir,
                Some(std::path::PathBuf::from("/tmp/k")),
                "{args:?}"
            );
        }
    }

    #[test]
    fn retries_come_from_flags_over_the_environment() {
        let env = |name: &str| match name {
            "REBUNO_DISPATCH_MAX_ATTEMPTS" => Some("3".to_owned()),
            "REBUNO_DISPATCH_MAX_DELAY" => Some("1m".to_owned()),
            _ => None,
        };
        let args = words(&[
            "--dispatch-max-attempts",
            "8",
            "serve",
            "--dispatch-base-delay=2s",
        ]);
        let Ok(Command::Serve(serve)) = parse(args, env) else {
            panic!("not serving");
        };
        let seconds = std::time::Duration::from_secs;
        let retry = serve.dispatch;
        assert_eq!(retry.max_attempts, Some(8));
        assert_eq!(
            (retry.base_delay, retry.max_delay),
            (Some(seconds(2)), Some(seconds(60)))
        );
        let Ok(Command::Serve(serve)) = parse(Vec::new(), env) else {
            panic!("not serving");
        };
        assert_eq!(serve.dispatch.max_attempts, Some(3));
        assert_eq!(serve.dispatch.base_delay, None);
        let zero = usage_error(&["--dispatch-max-attempts", "0"]);
        assert!(zero.starts_with("--dispatch-max-attempts is 0: "), "{zero}");
        let soon = usage_error(&["serve", "--dispatch-max-delay", "soon"]);
        assert!(soon.contains("\"soon\" is not a duration"), "{soon}");
        let bad_env = |name: &str| (name == "REBUNO_DISPATCH_BASE_DELAY").then(|| "x".to_owned());
        let Err(CliError::Usage(message)) = parse(Vec::new(), bad_env) else {
            panic!("a bad REBUNO_DISPATCH_BASE_DELAY is a usage error");
        };
        assert!(
            message.starts_with("REBUNO_DISPATCH_BASE_DELAY \"x\""),
            "{message}"
        );
        // Only serving reads them: a client command runs whatever they hold.
        assert!(parse(words(&["exec", "list"]), bad_env).is_ok());
        let client = usage_error(&["exec", "list", "--dispatch-max-attempts", "3"]);
        assert!(
            client.starts_with(
                "--dispatch-max-attempts is a serving option (rebuno-dev [serve] \
                 --dispatch-max-attempts N)"
            ),
            "{client}"
        );
    }

    #[test]
    fn serving_forms_still_work() {
        for args in [
            &[][..],
            &["serve"],
            &["--config", "m.yaml", "--addr", "0.0.0.0:9000"],
            &["serve", "-c=m.yaml", "-a", "0.0.0.0:9000"],
            &["--addr", "0.0.0.0:9000", "serve", "--config", "m.yaml"],
            &["--data-dir", "/tmp/k"],
            &["-d", "/tmp/k", "--addr", "0.0.0.0:9000"],
            &["--data-dir=/tmp/k", "serve"],
            &["-c", "m.yaml", "-d", "/tmp/k"],
        ] {
            assert!(
                matches!(parse_words(args), Ok(Command::Serve(_))),
                "{args:?}"
            );
        }
        assert!(usage_error(&["bogus"]).starts_with("unknown command \"bogus\""));
        assert!(usage_error(&["--bogus", "exec", "list"]).contains("\"--bogus\""));
    }

    #[test]
    fn help_anywhere() {
        assert_eq!(
            parse_words(&["--url", URL, "exec", "-h"]).ok(),
            Some(Command::Help(exec::USAGE))
        );
        assert_eq!(
            parse_words(&["help", "approvals"]).ok(),
            Some(Command::Help(approvals::USAGE))
        );
        assert_eq!(parse_words(&["help"]).ok(), Some(Command::Help(USAGE)));
        assert_eq!(
            parse_words(&["--url", URL, "--help"]).ok(),
            Some(Command::Help(USAGE))
        );
    }

    #[test]
    fn usage_follows_the_group_wherever_it_is() {
        assert_eq!(
            usage_for(&words(&["--url", URL, "exec", "bogus"])),
            exec::USAGE
        );
        assert_eq!(
            usage_for(&words(&["--url=x", "approvals"])),
            approvals::USAGE
        );
        assert_eq!(usage_for(&words(&["--config", "exec"])), USAGE);
        assert_eq!(usage_for(&words(&["help", "exec"])), exec::USAGE);
        assert_eq!(usage_for(&words(&["--addr"])), USAGE);
    }
}
