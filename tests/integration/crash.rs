//! An agent that dies mid-execution resumes on re-delivery: recorded steps replay, nothing
//! already recorded runs again.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::disallowed_methods)]

use crate::support;
use rebuno::wire::ExecutionStatus;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rebuno::{Agent, AgentBuilder, HandlerError, define_tool};
use rebuno_devkernel::{AgentSpec, DevKernel, NewExecution};
use serde::{Deserialize, Serialize};
use serde_json::json;
use support::*;

#[derive(Serialize, Deserialize)]
struct Email {
    to: String,
}

/// Side effects, counted across both agent processes.
#[derive(Default)]
struct Effects {
    first: AtomicUsize,
    second: AtomicUsize,
    /// While set, the handler hangs after the first tool call (the "crash" point).
    hang: AtomicBool,
}

fn with_handler(agent: AgentBuilder, effects: Arc<Effects>) -> AgentBuilder {
    let e1 = Arc::clone(&effects);
    let send = define_tool("send_email").execute(move |args: Email| {
        e1.first.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, HandlerError>(format!("sent to {}", args.to)) }
    });
    let e2 = Arc::clone(&effects);
    let archive = define_tool("archive").execute(move |_: Email| {
        e2.second.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>("archived".to_owned()) }
    });
    agent.handler_with_state(
        (send, archive, effects),
        |(send, archive, effects), input: Email| async move {
            let sent = send
                .call(Email {
                    to: input.to.clone(),
                })
                .await?;
            if effects.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let archived = archive.call(Email { to: input.to }).await?;
            Ok::<_, HandlerError>(json!([sent, archived]))
        },
    )
}

/// Serves an agent on its own runtime in its own thread, like a separate process.
fn spawn_process(
    kernel_url: String,
    effects: Arc<Effects>,
) -> (std::net::SocketAddr, tokio::runtime::Runtime) {
    std::thread::spawn(move || start_process(kernel_url, effects))
        .join()
        .expect("process thread")
}

fn start_process(
    kernel_url: String,
    effects: Arc<Effects>,
) -> (std::net::SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let addr = runtime.block_on(async {
        let agent = with_handler(
            Agent::builder("mailer").secret(SECRET).base_url(kernel_url),
            effects,
        )
        .build()
        .expect("agent");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(rebuno_hyper::serve(listener, agent).into_future());
        addr
    });
    (addr, runtime)
}

async fn wait_for(kernel: &DevKernel, id: &str, kind: &str) {
    for _ in 0..200 {
        if kernel.events(id).iter().any(|e| e.kind == kind) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no {kind} event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_agent_resumes_on_redelivery_without_rerunning_recorded_steps() {
    let _trace = trace_init();
    let kernel = DevKernel::start().await.expect("kernel");
    let effects = Arc::new(Effects::default());
    effects.hang.store(true, Ordering::SeqCst);

    let (first_addr, first_process) = spawn_process(kernel.url(), Arc::clone(&effects));
    kernel
        .register_agent(AgentSpec::new(
            "mailer",
            format!("http://{first_addr}/webhook"),
            SECRET,
        ))
        .expect("register");
    let created = kernel
        .create_execution(NewExecution::new(
            "mailer",
            json!({ "to": "ops@example.com" }),
        ))
        .await
        .expect("create");
    wait_for(&kernel, &created.id, "step.succeeded").await;

    // Crash: every task of the first process dies mid-handler, without a goodbye.
    first_process.shutdown_background();
    effects.hang.store(false, Ordering::SeqCst);

    let (second_addr, second_process) = spawn_process(kernel.url(), Arc::clone(&effects));
    kernel
        .register_agent(AgentSpec::new(
            "mailer",
            format!("http://{second_addr}/webhook"),
            SECRET,
        ))
        .expect("re-register");
    kernel.redeliver(&created.id).expect("redeliver");
    let done = kernel
        .wait_terminal(&created.id, WAIT)
        .await
        .expect("execution ends");

    assert_eq!(
        done.status,
        ExecutionStatus::Completed,
        "failure: {}",
        done.failure_reason
    );
    assert_eq!(
        done.output,
        Some(json!(["sent to ops@example.com", "archived"]))
    );
    assert_eq!(
        effects.first.load(Ordering::SeqCst),
        1,
        "the recorded send_email replayed instead of running again"
    );
    assert_eq!(effects.second.load(Ordering::SeqCst), 1);
    let events = kernel.events(&created.id);
    let acked: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "dispatch.acked")
        .map(|e| e.payload["attempt"].clone())
        .collect();
    assert_eq!(acked, [json!(1), json!(2)]);
    let succeeded = events.iter().filter(|e| e.kind == "step.succeeded").count();
    assert_eq!(succeeded, 2, "one success per tool, none for the replay");
    second_process.shutdown_background();
}
