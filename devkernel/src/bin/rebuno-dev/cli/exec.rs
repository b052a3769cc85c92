//! `rebuno-dev exec ...`: create (optionally watching), list, get, events, timeline, export,
//! cancel, redeliver.

use std::io::Write;

use rebuno::client::{Client, CreateExecution, ListExecutions};
use rebuno::wire::{Execution, ExecutionStatus};
use serde_json::Value;

use super::args::Scanned;
use super::client::Remote;
use super::{CliError, Outcome, watch};

/// Usage of the `exec` group.
pub(crate) const USAGE: &str = concat!(
    "\
usage: rebuno-dev [client options] exec <command> [options]

commands:
  create <agent> ['<json input>'] [--session S] [--watch]
                        create an execution; --watch follows its events (and the live
                        deltas of streamed LLM answers) until it ends
                        (exit 0 when completed, 1 otherwise)
  list [--agent A] [--status S] [--session S] [--limit N]
                        list executions, newest first
  get <id>              show one execution as JSON
  events <id>           print its event log, one line per event
  timeline <id>         draw it on a time axis from its event log: deliveries,
                        steps and their outcome, approvals and waits
  export <id>           print its history (execution, steps, events) as JSON, for
                        rebuno_devkernel::replay::check against a new build
  cancel <id>           cancel it
  redeliver <id>        deliver a running execution again now, as when its lease
                        expires (rebuno-dev only): the agent's current run is
                        superseded and a new one replays the recorded steps; try
                        replay against any host without killing it",
    client_options_help!(),
    exit_status_help!()
);

/// An `exec` subcommand.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ExecCommand {
    /// `exec create`.
    Create {
        /// Agent id.
        agent: String,
        /// Input JSON, if any.
        input: Option<Value>,
        /// Session label.
        session: Option<String>,
        /// Follow the events until the execution ends.
        watch: bool,
    },
    /// `exec list`.
    List {
        /// Filter by agent.
        agent: Option<String>,
        /// Filter by status.
        status: Option<String>,
        /// Filter by session.
        session: Option<String>,
        /// Page size.
        limit: Option<u32>,
    },
    /// `exec get`.
    Get(String),
    /// `exec events`.
    Events(String),
    /// `exec export`.
    Export(String),
    /// `exec timeline`.
    Timeline(String),
    /// `exec cancel`.
    Cancel(String),
    /// `exec redeliver`: the execution's in-flight dispatch reclaimed and delivered again
    /// (`POST /v0/dev/executions/{id}/redeliver`, a route of `rebuno-dev` only).
    Redeliver(String),
}

/// The one `<id>` argument of `get`, `events`, `export`, `timeline` and `cancel`.
fn one_id(rest: &[String], what: &str) -> Result<String, CliError> {
    let scanned = Scanned::scan(rest, &[], &[])?;
    scanned.arity(1, 1, what)?;
    Ok(scanned.positional[0].clone())
}

/// Parses `exec <command> ...` (without the leading `exec`).
pub(crate) fn parse(args: &[String]) -> Result<ExecCommand, CliError> {
    let Some((command, rest)) = args.split_first() else {
        return Err(CliError::Usage("exec needs a command".to_owned()));
    };
    match command.as_str() {
        "create" => parse_create(rest),
        "list" | "ls" => parse_list(rest),
        "get" => Ok(ExecCommand::Get(one_id(rest, "<id>")?)),
        "events" => Ok(ExecCommand::Events(one_id(rest, "<id>")?)),
        "export" => Ok(ExecCommand::Export(one_id(rest, "<id>")?)),
        "timeline" => Ok(ExecCommand::Timeline(one_id(rest, "<id>")?)),
        "cancel" => Ok(ExecCommand::Cancel(one_id(rest, "<id>")?)),
        "redeliver" => {
            let id = one_id(rest, "<id>")?;
            // The id goes into the route's path: only a UUID may.
            uuid::Uuid::parse_str(&id).map_err(|_| {
                CliError::Usage(format!(
                    "{id:?} is not an execution id (a UUID, as `exec list` prints)"
                ))
            })?;
            Ok(ExecCommand::Redeliver(id))
        }
        other => Err(CliError::Usage(format!("unknown exec command {other:?}"))),
    }
}

/// `exec create <agent> ['<json input>'] [--session S] [--watch]`.
fn parse_create(rest: &[String]) -> Result<ExecCommand, CliError> {
    let scanned = Scanned::scan(rest, &["--session", "-s"], &["--watch", "-w"])?;
    scanned.arity(1, 2, "<agent> ['<json input>']")?;
    let input = match scanned.positional.get(1) {
        Some(text) => Some(
            serde_json::from_str(text)
                .map_err(|e| CliError::Usage(format!("input is not JSON: {e}")))?,
        ),
        None => None,
    };
    Ok(ExecCommand::Create {
        agent: scanned.positional[0].clone(),
        input,
        session: scanned.value(&["--session", "-s"]),
        watch: scanned.has(&["--watch", "-w"]),
    })
}

/// `exec list [--agent A] [--status S] [--session S] [--limit N]`.
fn parse_list(rest: &[String]) -> Result<ExecCommand, CliError> {
    let scanned = Scanned::scan(rest, &["--agent", "--status", "--session", "--limit"], &[])?;
    scanned.arity(0, 0, "no arguments")?;
    let limit = match scanned.value(&["--limit"]) {
        Some(text) => Some(
            text.parse()
                .map_err(|_| CliError::Usage(format!("bad --limit {text:?}")))?,
        ),
        None => None,
    };
    let status = scanned.value(&["--status"]);
    if let Some(name) = &status {
        execution_status(name)?;
    }
    Ok(ExecCommand::List {
        agent: scanned.value(&["--agent"]),
        status,
        session: scanned.value(&["--session"]),
        limit,
    })
}

/// The execution status `name` spells; a usage error for any other word.
fn execution_status(name: &str) -> Result<ExecutionStatus, CliError> {
    match serde_json::from_value(Value::String(name.to_owned())) {
        Ok(status) if status != ExecutionStatus::Unknown => Ok(status),
        _ => Err(CliError::Usage(format!(
            "bad --status {name:?}: pending, running, blocked, completed, failed or cancelled"
        ))),
    }
}

/// Runs an `exec` subcommand.
pub(crate) async fn run(
    remote: &Remote,
    command: ExecCommand,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    match command {
        ExecCommand::Create {
            agent,
            input,
            session,
            watch,
        } => {
            let request = creation(remote.client(), &agent, input, session);
            create(remote, request, &agent, watch, out).await
        }
        ExecCommand::List {
            agent,
            status,
            session,
            limit,
        } => {
            let status = status.as_deref().map(execution_status).transpose()?;
            let request = listing(remote.client(), agent, status, session, limit);
            list(remote, request, out).await
        }
        ExecCommand::Get(id) => get(remote, &id, out).await,
        ExecCommand::Events(id) => events(remote, &id, out).await,
        ExecCommand::Export(id) => export(remote, &id, out).await,
        ExecCommand::Timeline(id) => timeline(remote, &id, out).await,
        ExecCommand::Cancel(id) => cancel(remote, &id, out).await,
        ExecCommand::Redeliver(id) => redeliver(remote, &id, out).await,
    }
}

/// The SDK request of `exec create`.
fn creation(
    client: &Client,
    agent: &str,
    input: Option<Value>,
    session: Option<String>,
) -> CreateExecution {
    let mut request = client.create(agent);
    if let Some(input) = input {
        request = request.input(input);
    }
    if let Some(session) = session {
        request = request.session(session);
    }
    request
}

/// `exec create`: prints `id status`, then with `watch` follows the execution to its end.
async fn create(
    remote: &Remote,
    request: CreateExecution,
    agent: &str,
    watch: bool,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let created = match remote.call(request.send()).await {
        Ok(created) => created,
        Err(error) => return Err(explain_create_error(remote, agent, error).await),
    };
    writeln!(out, "{} {}", created.id, created.status.as_str())?;
    if !watch {
        return Ok(Outcome::Success);
    }
    let completed = watch::follow(remote, &created.id, out).await?;
    Ok(if completed {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// How the kernel's message of an unknown agent starts (`not found: agent "<id>"`, or
/// `not found: agent` from kernels that do not name it).
const AGENT_NOT_FOUND: &str = "not found: agent";

/// Turns a `404 not_found` of `create` about `agent` into [`CliError::UnknownAgent`], with
/// the registered agents when the kernel lists them (`GET /v0/agents`); any other error is
/// returned as it is.
async fn explain_create_error(remote: &Remote, agent: &str, error: CliError) -> CliError {
    let CliError::Api {
        status: 404,
        code,
        message,
    } = &error
    else {
        return error;
    };
    if code != "not_found" {
        return error;
    }
    let registered = registered_agents(remote).await;
    let unknown = match &registered {
        Some(ids) => !ids.iter().any(|id| id == agent),
        // The kernel's words, or the SDK's explanation of them (`agent "<id>" is not registered`).
        None => {
            message.starts_with(AGENT_NOT_FOUND)
                || message.starts_with(&format!("agent {agent:?} is not registered"))
        }
    };
    if !unknown {
        return error;
    }
    CliError::UnknownAgent {
        agent: agent.to_owned(),
        url: remote.url().to_owned(),
        registered,
    }
}

/// The ids of the kernel's agents, sorted; `None` when it would not list them (e.g. a token
/// without `agents:read`).
async fn registered_agents(remote: &Remote) -> Option<Vec<String>> {
    let agents = match remote.client().agents().await {
        Ok(agents) => agents,
        Err(error) => {
            tracing::debug!(%error, "cannot list the kernel's agents");
            return None;
        }
    };
    let mut ids: Vec<String> = agents.into_iter().map(|agent| agent.id).collect();
    ids.sort();
    Some(ids)
}

/// The SDK request of `exec list`, with the filters given.
fn listing(
    client: &Client,
    agent: Option<String>,
    status: Option<ExecutionStatus>,
    session: Option<String>,
    limit: Option<u32>,
) -> ListExecutions {
    let mut request = client.list();
    if let Some(agent) = agent {
        request = request.agent_id(agent);
    }
    if let Some(status) = status {
        request = request.status(status);
    }
    if let Some(session) = session {
        request = request.session(session);
    }
    if let Some(limit) = limit {
        request = request.limit(limit);
    }
    request
}

/// `exec list`: one line per execution of the first page.
async fn list(
    remote: &Remote,
    request: ListExecutions,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let page = remote.call(request.send()).await?;
    for execution in &page.executions {
        writeln!(out, "{}", execution_line(execution))?;
    }
    Ok(Outcome::Success)
}

/// One execution as a terminal line: `id  agent status created_at`.
fn execution_line(execution: &Execution) -> String {
    format!(
        "{}  {:<20} {:<10} {}",
        execution.id,
        execution.agent_id,
        execution.status.as_str(),
        execution.created_at
    )
}

/// `exec get`: the execution as pretty JSON.
async fn get(remote: &Remote, id: &str, out: &mut (dyn Write + Send)) -> Result<Outcome, CliError> {
    let execution = remote.call(remote.client().get(id)).await?;
    let pretty = serde_json::to_string_pretty(&execution).map_err(std::io::Error::from)?;
    writeln!(out, "{pretty}")?;
    Ok(Outcome::Success)
}

/// `exec events`: one line per event of the whole log.
async fn events(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    for event in remote.call(remote.client().all_events(id)).await? {
        writeln!(out, "{}", watch::event_line(&event))?;
    }
    Ok(Outcome::Success)
}

/// `exec export`: the history [`replay::check`](rebuno_devkernel::replay::check) reads, as JSON.
async fn export(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let history = remote
        .call(rebuno_devkernel::replay::History::fetch(
            remote.client(),
            id,
        ))
        .await?;
    writeln!(out, "{}", history.to_json())?;
    Ok(Outcome::Success)
}

/// `exec timeline`: the execution on a time axis (see [`super::timeline`]).
async fn timeline(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let events = remote.call(remote.client().all_events(id)).await?;
    write!(
        out,
        "{}",
        super::timeline::render(&events, super::timeline::AXIS)
    )?;
    Ok(Outcome::Success)
}

/// `exec cancel`.
async fn cancel(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    remote.call(remote.client().cancel(id)).await?;
    writeln!(out, "{id} cancelled")?;
    Ok(Outcome::Success)
}

/// `exec redeliver`: prints `<id> redelivered: dispatch <dispatch>, attempt <n>`.
async fn redeliver(
    remote: &Remote,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let answer = remote
        .post_dev(&format!("/v0/dev/executions/{id}/redeliver"))
        .await?;
    let dispatch = answer["dispatch_id"].as_str().unwrap_or("?");
    writeln!(
        out,
        "{id} redelivered: dispatch {dispatch}, attempt {}",
        answer["attempt"]
    )?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse_words(words: &[&str]) -> Result<ExecCommand, CliError> {
        let args: Vec<String> = words.iter().map(|s| (*s).to_owned()).collect();
        parse(&args)
    }

    #[test]
    fn create() {
        assert_eq!(
            parse_words(&[
                "create",
                "hello",
                r#"{"a":1}"#,
                "--session",
                "s1",
                "--watch"
            ])
            .unwrap(),
            ExecCommand::Create {
                agent: "hello".into(),
                input: Some(json!({"a": 1})),
                session: Some("s1".into()),
                watch: true,
            }
        );
        assert_eq!(
            parse_words(&["create", "hello"]).unwrap(),
            ExecCommand::Create {
                agent: "hello".into(),
                input: None,
                session: None,
                watch: false,
            }
        );
        assert!(parse_words(&["create"]).is_err());
        assert!(parse_words(&["create", "hello", "{not json"]).is_err());
        assert!(parse_words(&["create", "a", "1", "extra"]).is_err());
    }

    #[test]
    fn others() {
        assert_eq!(
            parse_words(&["list", "--agent", "a", "--status=running", "--limit", "5"]).unwrap(),
            ExecCommand::List {
                agent: Some("a".into()),
                status: Some("running".into()),
                session: None,
                limit: Some(5),
            }
        );
        assert!(parse_words(&["list", "--limit", "x"]).is_err());
        assert_eq!(
            parse_words(&["get", "x"]).unwrap(),
            ExecCommand::Get("x".into())
        );
        assert_eq!(
            parse_words(&["events", "x"]).unwrap(),
            ExecCommand::Events("x".into())
        );
        assert_eq!(
            parse_words(&["export", "x"]).unwrap(),
            ExecCommand::Export("x".into())
        );
        assert!(parse_words(&["export"]).is_err());
        assert_eq!(
            parse_words(&["timeline", "x"]).unwrap(),
            ExecCommand::Timeline("x".into())
        );
        assert_eq!(
            parse_words(&["cancel", "x"]).unwrap(),
            ExecCommand::Cancel("x".into())
        );
        let id = "0192f1a0-0000-7000-8000-000000000000";
        assert_eq!(
            parse_words(&["redeliver", id]).unwrap(),
            ExecCommand::Redeliver(id.into())
        );
        let error = parse_words(&["redeliver", "nope"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("not an execution id"), "{error}");
        assert!(parse_words(&["redeliver"]).is_err());
        assert!(parse_words(&["get"]).is_err());
        assert!(parse_words(&["frobnicate"]).is_err());
        assert!(parse_words(&[]).is_err());
    }

    #[test]
    fn statuses_are_checked_when_parsed() {
        assert!(parse_words(&["list", "--status", "blocked"]).is_ok());
        let error = parse_words(&["list", "--status", "done"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(
            error.to_string().starts_with("bad --status \"done\""),
            "{error}"
        );
        assert_eq!(ExecutionStatus::Cancelled.as_str(), "cancelled");
        assert_eq!(
            execution_status("completed").unwrap(),
            ExecutionStatus::Completed
        );
    }
}
