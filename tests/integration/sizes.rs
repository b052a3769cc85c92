//! Future sizes: an execution waiting in a tool holds its handler's future, whose size is that
//! of its largest state. The kernel round trips around a tool body are boxed so that a tool call
//! costs a waiting execution less (measured on 2026-12-01: a tool call's future 2,392 -> 1,472
//! bytes, a local step's 2,560 -> 1,632; with retry policies, 2026-12-03: 1,648 and 1,712, the
//! retry loop itself boxed; 2026-12-04: `llm::fetch` 1,608 bytes in a release build, 544 here
//! since the durable call is boxed). The bounds guard against inlining them again.

use rebuno::{HandlerError, define_tool};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Args {
    i: u64,
}

#[test]
fn a_tool_call_future_stays_small() {
    let tool = define_tool("t").execute(|args: Args| async move { Ok::<_, HandlerError>(args.i) });
    let call = tool.call(Args { i: 1 });
    let size = std::mem::size_of_val(&call);
    println!("Tool::call future: {size} bytes");
    assert!(size <= 1700, "Tool::call future is {size} bytes");
}

#[test]
fn a_local_step_future_stays_small() {
    let step = rebuno::step("s", || async { Ok::<_, HandlerError>(1u8) });
    let size = std::mem::size_of_val(&step);
    println!("step future: {size} bytes");
    assert!(size <= 1800, "step future is {size} bytes");
}

#[test]
fn an_llm_fetch_future_stays_small() {
    let request = http::Request::post("http://127.0.0.1:9/v1/chat/completions")
        .body(bytes::Bytes::new())
        .unwrap();
    let fetch = rebuno::llm::fetch(request);
    let size = std::mem::size_of_val(&fetch);
    println!("llm::fetch future: {size} bytes");
    assert!(size <= 600, "llm::fetch future is {size} bytes");
}
