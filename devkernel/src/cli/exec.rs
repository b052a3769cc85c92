//! `rebuno-dev exec ...`: create (optionally watching), list, get, events, cancel.

use std::io::Write;

use serde_json::{Value, json};

use super::args::Scanned;
use super::client::Client;
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
  cancel <id>           cancel it",
    client_options_help!(),
    exit_status_help!()
);

/// An `exec` subcommand.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecCommand {
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
    /// `exec cancel`.
    Cancel(String),
}

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
        "create" => {
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
        "list" | "ls" => {
            let scanned =
                Scanned::scan(rest, &["--agent", "--status", "--session", "--limit"], &[])?;
            scanned.arity(0, 0, "no arguments")?;
            let limit = match scanned.value(&["--limit"]) {
                Some(text) => Some(
                    text.parse()
                        .map_err(|_| CliError::Usage(format!("bad --limit {text:?}")))?,
                ),
                None => None,
            };
            Ok(ExecCommand::List {
                agent: scanned.value(&["--agent"]),
                status: scanned.value(&["--status"]),
                session: scanned.value(&["--session"]),
                limit,
            })
        }
        "get" => Ok(ExecCommand::Get(one_id(rest, "<id>")?)),
        "events" => Ok(ExecCommand::Events(one_id(rest, "<id>")?)),
        "cancel" => Ok(ExecCommand::Cancel(one_id(rest, "<id>")?)),
        other => Err(CliError::Usage(format!("unknown exec command {other:?}"))),
    }
}

/// `?k=v&...` of the non-empty filters (values are percent-encoded).
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn text(value: &Value, field: &str) -> String {
    value
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// Runs an `exec` subcommand.
pub(crate) async fn run(
    client: &Client,
    command: ExecCommand,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    match command {
        ExecCommand::Create {
            agent,
            input,
            session,
            watch,
        } => create(client, &agent, input, session, watch, out).await,
        ExecCommand::List {
            agent,
            status,
            session,
            limit,
        } => {
            let filters = [
                ("agent_id", agent),
                ("status", status),
                ("session", session),
                ("limit", limit.map(|l| l.to_string())),
            ];
            list(client, &filters, out).await
        }
        ExecCommand::Get(id) => get(client, &id, out).await,
        ExecCommand::Events(id) => events(client, &id, out).await,
        ExecCommand::Cancel(id) => cancel(client, &id, out).await,
    }
}

/// `exec create`: prints `id status`, then with `watch` follows the execution to its end.
async fn create(
    client: &Client,
    agent: &str,
    input: Option<Value>,
    session: Option<String>,
    watch: bool,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let mut body = json!({"agent_id": agent});
    if let Some(input) = input {
        body["input"] = input;
    }
    if let Some(session) = session {
        body["session"] = json!(session);
    }
    let created = match client.post("/v0/executions", Some(&body)).await {
        Ok(created) => created,
        Err(error) => return Err(explain_create_error(client, agent, error).await),
    };
    let id = text(&created, "id");
    writeln!(out, "{id} {}", text(&created, "status"))?;
    if !watch {
        return Ok(Outcome::Success);
    }
    let completed = watch::follow(client, &id, out).await?;
    Ok(if completed {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// The kernel's message of an unknown agent (`KernelError::not_found("agent")`).
const AGENT_NOT_FOUND: &str = "not found: agent";

/// Turns a `404 not_found` of `create` about `agent` into [`CliError::UnknownAgent`], with
/// the registered agents when the kernel lists them (`GET /v0/agents`); any other error is
/// returned as it is.
async fn explain_create_error(client: &Client, agent: &str, error: CliError) -> CliError {
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
    let registered = registered_agents(client).await;
    let unknown = match &registered {
        Some(ids) => !ids.iter().any(|id| id == agent),
        None => message == AGENT_NOT_FOUND,
    };
    if !unknown {
        return error;
    }
    CliError::UnknownAgent {
        agent: agent.to_owned(),
        url: client.base().to_owned(),
        registered,
    }
}

/// The ids of the kernel's agents, sorted; `None` when it would not list them (e.g. a token
/// without `agents:read`).
async fn registered_agents(client: &Client) -> Option<Vec<String>> {
    let listed = match client.get("/v0/agents").await {
        Ok(listed) => listed,
        Err(error) => {
            tracing::debug!(%error, "cannot list the kernel's agents");
            return None;
        }
    };
    let mut ids: Vec<String> = listed
        .as_array()?
        .iter()
        .filter_map(|agent| agent.get("id").and_then(Value::as_str))
        .map(str::to_owned)
        .collect();
    ids.sort();
    Some(ids)
}

/// `exec list`: one line per execution.
async fn list(
    client: &Client,
    filters: &[(&str, Option<String>)],
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let page = client
        .get(&format!("/v0/executions{}", query(filters)))
        .await?;
    for exec in page["executions"].as_array().into_iter().flatten() {
        writeln!(
            out,
            "{}  {:<20} {:<10} {}",
            text(exec, "id"),
            text(exec, "agent_id"),
            text(exec, "status"),
            text(exec, "created_at")
        )?;
    }
    Ok(Outcome::Success)
}

/// `exec get`: the execution as pretty JSON.
async fn get(client: &Client, id: &str, out: &mut (dyn Write + Send)) -> Result<Outcome, CliError> {
    let exec = client
        .get(&format!("/v0/executions/{}", encode(id)))
        .await?;
    let pretty = serde_json::to_string_pretty(&exec).unwrap_or_else(|_| exec.to_string());
    writeln!(out, "{pretty}")?;
    Ok(Outcome::Success)
}

/// `exec events`: one line per event.
async fn events(
    client: &Client,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    let path = format!("/v0/executions/{}/events?limit=1000", encode(id));
    for event in client.get(&path).await?.as_array().into_iter().flatten() {
        writeln!(out, "{}", watch::event_line(event))?;
    }
    Ok(Outcome::Success)
}

/// `exec cancel`.
async fn cancel(
    client: &Client,
    id: &str,
    out: &mut (dyn Write + Send),
) -> Result<Outcome, CliError> {
    client
        .post(&format!("/v0/executions/{}/cancel", encode(id)), None)
        .await?;
    writeln!(out, "{id} cancelled")?;
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
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
            parse_words(&["cancel", "x"]).unwrap(),
            ExecCommand::Cancel("x".into())
        );
        assert!(parse_words(&["get"]).is_err());
        assert!(parse_words(&["frobnicate"]).is_err());
        assert!(parse_words(&[]).is_err());
    }

    #[test]
    fn queries() {
        assert_eq!(query(&[("a", None)]), "");
        assert_eq!(
            query(&[
                ("agent_id", Some("x y".into())),
                ("status", Some("ok".into()))
            ]),
            "?agent_id=x%20y&status=ok"
        );
    }
}
