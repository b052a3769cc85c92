//! The rig path: one completion through rig's OpenAI-compatible client, whose HTTP client is
//! [`rebuno::llm::DurableLlm`] over rig's reqwest client (reqwest's wasm backend is the JS
//! `fetch`), so the request is a durable `llm_call` step, replayed on a re-delivery.

use futures_util::StreamExt;
use rebuno::HandlerError;
use rebuno::llm::DurableLlm;
use rig_core::completion::CompletionRequest;
use rig_core::error::ProviderError;
use rig_core::message::AssistantContent;
use rig_core::providers::openai::OpenAIConfig;
use rig_core::streaming::{Item, StreamEvent};
use rig_reqwest::ReqwestClient;

/// The model asked, which is also the `llm_call` step's target.
const MODEL: &str = "gpt-test";
const PROMPT: &str = "Say hello from the edge.";

/// Asks the OpenAI-compatible provider at `base_url` (e.g. `http://…/v1`) through rig's
/// chat-completions wire, streamed or whole. Returns the answer's text and how many text
/// pieces rig delivered (each streamed delta, or the message's text parts).
pub(crate) async fn ask(base_url: &str, stream: bool) -> Result<(String, usize), HandlerError> {
    let openai = OpenAIConfig::new("not-needed")
        .with_base_url(base_url.trim_end_matches('/'))
        .connect(DurableLlm::new(ReqwestClient::default()));
    let chat = openai.chat(MODEL);
    let request = CompletionRequest::new(PROMPT);
    let pieces: Vec<String> = if stream {
        let mut events = chat.stream(request).map_err(failed)?;
        let mut pieces = Vec::new();
        while let Some(item) = events.next().await {
            if let Item::Event(StreamEvent::Text { text, .. }) = item.map_err(failed)? {
                pieces.push(text);
            }
        }
        pieces
    } else {
        let response = chat.call(request).await.map_err(failed)?;
        response
            .choice
            .iter()
            .filter_map(|content| match content {
                AssistantContent::Text(text) => Some(text.text().to_owned()),
                _ => None,
            })
            .collect()
    };
    Ok((pieces.concat(), pieces.len()))
}

/// A rig error as the handler's: a Rebuno refusal or control flow inside it keeps its kind
/// (so a yield stays a yield); anything else travels as its message, since on wasm rig's
/// errors need not be `Send`.
fn failed(error: ProviderError) -> HandlerError {
    match rebuno::llm::raise_for_refusal(&error) {
        Err(rebuno) => rebuno.into(),
        Ok(()) => error.to_string().into(),
    }
}
