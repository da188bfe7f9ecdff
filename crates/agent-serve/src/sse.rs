//! Server-Sent Events: a run's events as an SSE response, each with its `id:`, with
//! keep-alive comments and the headers that keep proxies from buffering the stream.

use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;

use crate::runs::{EventStream, Numbered};

/// How often an idle stream sends a comment (proxies cut streams silent for 60 s).
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An SSE response: `first`, then what `map` makes of each of the run's events (each
/// carrying the event's sequence number as its `id`), then `last`.
pub(crate) fn respond(
    first: Vec<Event>,
    events: EventStream,
    mut map: impl FnMut(&Numbered) -> Vec<Event> + Send + 'static,
    last: Vec<Event>,
) -> Response {
    respond_until(first, events, move |numbered| (map(numbered), false), last)
}

/// [`respond`], whose `map` also says when the stream is over (`true`: `last` follows what
/// it made, and later events of the run are not sent): for protocols whose stream ends at an
/// event the run goes on after, such as a wait for a person.
pub(crate) fn respond_until(
    first: Vec<Event>,
    events: EventStream,
    map: impl FnMut(&Numbered) -> (Vec<Event>, bool) + Send + 'static,
    last: Vec<Event>,
) -> Response {
    struct State<M> {
        first: std::vec::IntoIter<Event>,
        pending: std::vec::IntoIter<Event>,
        events: Option<EventStream>,
        map: M,
        last: std::vec::IntoIter<Event>,
    }
    let state = State {
        first: first.into_iter(),
        pending: Vec::new().into_iter(),
        events: Some(events),
        map,
        last: last.into_iter(),
    };
    let body = stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.first.next() {
                return Some((Ok::<_, Infallible>(event), state));
            }
            if let Some(event) = state.pending.next() {
                return Some((Ok(event), state));
            }
            if let Some(events) = &mut state.events {
                match events.next().await {
                    Some(numbered) => {
                        let id = numbered.seq.to_string();
                        let (made, over) = (state.map)(&numbered);
                        let made: Vec<Event> = made.into_iter().map(|e| e.id(id.clone())).collect();
                        state.pending = made.into_iter();
                        if over {
                            state.events = None;
                        }
                        continue;
                    }
                    None => state.events = None,
                }
            }
            return state.last.next().map(|event| (Ok(event), state));
        }
    });
    let mut response = Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let headers = response.headers_mut();
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert("cache-control", HeaderValue::from_static("no-cache"));
    response
}

/// The event id a reconnecting client sends (`Last-Event-ID`), as a sequence number.
pub(crate) fn last_event_id(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// An event named `name` whose data is `data` as JSON.
pub(crate) fn json_event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .data(serde_json::to_string(data).unwrap_or_else(|_| "null".into()))
}
