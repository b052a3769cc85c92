//! Scenarios 13-16: a subagent run from a tool, a session of two turns whose child reads
//! `previous()`, a directory resource checkpointed after every write, and a fork of it right
//! after the first write (restored from that checkpoint); and a subagent that fails, failing
//! its parent's tool. Python: `py/flows.py`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rebuno::resource::{Checkpoints, ResourceDriver, resource};
use rebuno::wire::ExecutionStatus;
use rebuno::{AgentBuilder, BoxError, HandlerError, Subagent, Tool, define_tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::Justified;
use crate::kit::Kit;
use crate::run::differential;
use crate::world::{Group, Side};

pub static GROUP: Group = Group {
    agent_id: "diff-flow",
    py_module: "flows",
    policy: None,
    rust: twin,
};

#[derive(Serialize, Deserialize)]
struct Consult {
    question: String,
    thread: String,
}

#[derive(Serialize, Deserialize)]
struct Question {
    question: String,
}

#[derive(Serialize, Deserialize)]
struct Note {
    name: String,
    text: String,
}

/// Each execution's workspace directory, for the `write_note` body.
type Workspaces = Arc<Mutex<HashMap<String, PathBuf>>>;

#[derive(Clone)]
struct Flows {
    kit: Kit,
    consult: Tool<Consult, Value>,
    mope: Tool<Question, String>,
    write_note: Tool<Note, Vec<String>>,
    workspaces: Workspaces,
}

fn twin(builder: AgentBuilder, kit: Kit) -> AgentBuilder {
    let consult = define_tool("consult").execute(|a: Consult| async move {
        let child = json!({ "case": "chat", "question": a.question });
        let mut call = Subagent::new("diff-flow", child);
        if !a.thread.is_empty() {
            call = call.session(a.thread);
        }
        Ok::<Value, HandlerError>(call.run().await?)
    });
    let mope = define_tool("mope").execute(|a: Question| async move {
        Err::<String, _>(HandlerError::from(format!("no comment on {}", a.question)))
    });
    let workspaces = Workspaces::default();
    let (k, ws) = (kit.clone(), Arc::clone(&workspaces));
    let write_note = define_tool("write_note")
        .resources(["ws"])
        .execute(move |a: Note| {
            let (k, ws) = (k.clone(), Arc::clone(&ws));
            async move {
                let id = rebuno::execution()?.id().to_owned();
                let path = ws.lock().unwrap()[&id].clone();
                k.mark("write_note.ran", &a.name);
                std::fs::write(path.join(&a.name), &a.text)?;
                Ok::<_, HandlerError>(listing(&path))
            }
        });
    let flows = Flows {
        kit,
        consult,
        mope,
        write_note,
        workspaces,
    };
    builder.handler_with_state(flows, |f: Flows, input: Value| async move {
        f.handle(input).await
    })
}

impl Flows {
    async fn handle(self, input: Value) -> Result<Value, HandlerError> {
        let text = |key: &str| input[key].as_str().unwrap_or_default().to_owned();
        match text("case").as_str() {
            "lead" => {
                let consult = Consult {
                    question: text("question"),
                    thread: text("thread"),
                };
                Ok(json!({ "answer": self.consult.call(consult).await? }))
            }
            "chat" => self.chat(text("question")).await,
            "notes" => self.notes(&input["notes"]).await,
            other => Err(format!("unknown case {other}").into()),
        }
    }

    async fn chat(&self, question: String) -> Result<Value, HandlerError> {
        self.kit.released(&format!("chat-{question}")).await;
        if question == "sulk" {
            return Ok(self.mope.call(Question { question }).await?.into());
        }
        let previous = rebuno::previous().await?;
        let turns = previous["turns"].as_u64().unwrap_or(0) + 1;
        let mood: String = rebuno::step("mood", || async move {
            let mood = if turns == 1 { "curious" } else { "familiar" };
            Ok::<_, HandlerError>(mood.to_owned())
        })
        .await?;
        self.kit.mark("chat.ran", &format!("turn {turns}"));
        rebuno::execution()?.set_state(json!({ "turns": turns, "last": question }))?;
        let reply = format!("turn {turns}: {question}");
        Ok(json!({ "reply": reply, "mood": mood, "previous": previous }))
    }

    async fn notes(&self, notes: &Value) -> Result<Value, HandlerError> {
        let driver = DirDriver(self.kit.clone());
        let path = resource("ws", driver, Checkpoints::every(1)).await?;
        let id = rebuno::execution()?.id().to_owned();
        self.workspaces.lock().unwrap().insert(id, path.clone());
        let mut listings = Vec::new();
        for note in notes.as_array().into_iter().flatten() {
            let note: Note = serde_json::from_value(note.clone())?;
            listings.push(self.write_note.call(note).await?);
        }
        let mut files = serde_json::Map::new();
        for name in listing(&path) {
            files.insert(
                name.clone(),
                std::fs::read_to_string(path.join(&name))?.into(),
            );
        }
        Ok(json!({ "listings": listings, "files": files }))
    }
}

/// The sorted file names of a directory.
fn listing(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).expect("workspace");
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        std::fs::copy(entry.path(), to.join(entry.file_name()))?;
    }
    Ok(())
}

/// The twin of `flows.py`'s `DirDriver`: a directory per execution under the scratch dir,
/// checkpointed as immutable copies under `checkpoints/<ref>`.
struct DirDriver(Kit);

#[derive(Serialize, Deserialize)]
struct DirBinding {
    path: PathBuf,
}

impl ResourceDriver for DirDriver {
    type Handle = PathBuf;
    type Binding = DirBinding;

    fn driver_id(&self) -> String {
        "diff-dir".to_owned()
    }

    fn configuration(&self) -> Value {
        json!({ "layout": "flat" })
    }

    async fn create(&self, checkpoint: Option<&str>) -> Result<(PathBuf, DirBinding), BoxError> {
        let path = self
            .0
            .dir
            .join("workspaces")
            .join(uuid::Uuid::new_v4().simple().to_string());
        match checkpoint {
            Some(saved) => copy_dir(&self.0.dir.join("checkpoints").join(saved), &path)?,
            None => std::fs::create_dir_all(&path)?,
        }
        let how = if checkpoint.is_some() {
            "restored"
        } else {
            "fresh"
        };
        self.0.mark("driver.create", how);
        Ok((path.clone(), DirBinding { path }))
    }

    async fn open(&self, binding: DirBinding) -> Result<PathBuf, BoxError> {
        Ok(binding.path)
    }

    async fn checkpoint(&self, handle: &PathBuf) -> Result<String, BoxError> {
        let name = format!("cp-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        copy_dir(handle, &self.0.dir.join("checkpoints").join(&name))?;
        self.0.mark("driver.checkpoint", &listing(handle).join(" "));
        Ok(name)
    }
}

/// One parent turn: the child is released once the parent is blocked on it.
async fn turn(side: &mut Side, question: &str, thread: &str) -> Vec<String> {
    let input = json!({ "case": "lead", "question": question, "thread": thread });
    let parent = side.create(input).await;
    side.wait_status(&parent, |s| s == ExecutionStatus::Blocked)
        .await;
    let client = rebuno::client::Client::builder()
        .base_url(side.kernel.url())
        .api_key("")
        .build()
        .expect("client");
    let page = client.list().agent_id("diff-flow").send().await;
    let newest = page.expect("list").executions.remove(0); // newest first: the child
    let child = newest.id.clone();
    side.release(&format!("chat-{question}"));
    side.wait_terminal(&parent).await;
    side.wait_terminal(&child).await;
    vec![parent, child]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13_subagent() {
    let drive = async |side: &mut Side| turn(side, "hello", "").await;
    differential("s13-subagent", &GROUP, &[], drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s13b_failed_subagent_fails_the_parent_tool() {
    let justified = [Justified {
        why: "the Rust SDK appends a failed subagent's own failure_reason to the replayed \
              error's text (by design, src/wire.rs `error_message`); Python stops at the \
              kernel's reason `subagent_failed`. The stable token and prefix are the same",
        on: "execution.failed",
        python: "\"reason\":\"tool_error: consult: subagent_failed\"",
        rust: "\"reason\":\"tool_error: consult: subagent_failed: tool_error: mope: no comment on sulk\"",
    }];
    let drive = async |side: &mut Side| turn(side, "sulk", "").await;
    differential("s13b-subagent-failed", &GROUP, &justified, drive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s14_session_with_previous() {
    let drive = async |side: &mut Side| {
        let mut ids = turn(side, "hello", "thread-7").await;
        ids.extend(turn(side, "again", "thread-7").await);
        ids
    };
    differential("s14-session", &GROUP, &[], drive).await;
}

fn notes() -> Value {
    let notes = [("a.txt", "alpha"), ("b.txt", "beta")]
        .map(|(name, text)| json!({ "name": name, "text": text }));
    json!({ "case": "notes", "notes": notes })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15_resource_with_checkpoints() {
    let drive = async |side: &mut Side| vec![side.run(notes()).await];
    differential("s15-resource", &GROUP, &[], drive).await;
}

/// Forks right after the first write succeeded: it replays, the second write runs live on the
/// directory restored from the checkpoint that covers that point.
async fn forked(side: &mut Side) -> Vec<String> {
    let source = side.run(notes()).await;
    let steps = side.kernel.steps(&source);
    let first = steps
        .iter()
        .find(|s| s.args.as_ref().is_some_and(|a| a["name"] == "a.txt"))
        .expect("write a.txt");
    let events = side.kernel.events(&source);
    let written = events
        .iter()
        .find(|e| e.kind == "step.succeeded" && e.payload["step_id"] == first.step_id.as_str())
        .expect("a.txt written");
    let fork = side
        .kernel
        .fork(&source, written.event_seq)
        .expect("fork")
        .id;
    side.watch(&fork);
    side.wait_terminal(&fork).await;
    vec![source, fork]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s16_fork_restores_the_resource() {
    differential("s16-fork", &GROUP, &[], forked).await;
}
