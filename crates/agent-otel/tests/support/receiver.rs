//! An OTLP/HTTP receiver on 127.0.0.1 for tests and benchmarks: it decodes what exporters
//! send (protobuf, with `opentelemetry-proto`) into [`Received`] spans.

#![allow(dead_code)] // each user takes what it needs

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// One span as the receiver decoded it.
#[derive(Clone, Debug)]
pub struct Received {
    pub service: String,
    pub name: String,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    pub trace_id: Vec<u8>,
    pub attributes: HashMap<String, String>,
    /// Each attribute's OTLP value type (`string`, `int`, `bool`, `double`, …).
    pub kinds: HashMap<String, &'static str>,
}

/// An OTLP/HTTP receiver on a free port of 127.0.0.1, on a thread of its own.
pub struct Receiver {
    pub port: u16,
    pub spans: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = spans.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let sink = sink.clone();
                std::thread::spawn(move || serve(stream, &sink));
            }
        });
        Receiver { port, spans }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many spans have arrived.
    pub fn count(&self) -> usize {
        self.spans.lock().unwrap().len()
    }

    /// The spans received so far, waiting up to a minute for at least `count` (a bound
    /// against a hang only: it returns as soon as they are there).
    pub fn wait_for(&self, count: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if spans.len() >= count || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Answers OTLP/HTTP export requests on one connection (keep-alive) until it closes.
fn serve(mut stream: TcpStream, sink: &Mutex<Vec<Received>>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end + 4;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_string();
        let length: usize = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Vec<u8> = buffer.drain(..head_end + length).skip(head_end).collect();
        let status = if head.starts_with("POST /v1/traces ") {
            match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    sink.lock().unwrap().extend(decode(request));
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            }
        } else {
            "404 Not Found"
        };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        );
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn text(value: Option<AnyValue>) -> String {
    match value {
        Some(AnyValue::StringValue(s)) => s,
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        // A string array as the JSON text of its strings.
        Some(AnyValue::ArrayValue(array)) => {
            let items: Vec<String> = array.values.into_iter().map(|v| text(v.value)).collect();
            format!("{items:?}")
        }
        other => format!("{other:?}"),
    }
}

fn kind(value: Option<&AnyValue>) -> &'static str {
    match value {
        Some(AnyValue::StringValue(_)) => "string",
        Some(AnyValue::IntValue(_)) => "int",
        Some(AnyValue::BoolValue(_)) => "bool",
        Some(AnyValue::DoubleValue(_)) => "double",
        Some(AnyValue::ArrayValue(_)) => "array",
        Some(_) => "other",
        None => "none",
    }
}

pub fn decode(request: ExportTraceServiceRequest) -> Vec<Received> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.clone().and_then(|v| v.value)))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                out.push(Received {
                    service: service.clone(),
                    name: span.name,
                    span_id: span.span_id,
                    parent_span_id: span.parent_span_id,
                    trace_id: span.trace_id,
                    kinds: span
                        .attributes
                        .iter()
                        .map(|kv| {
                            (
                                kv.key.clone(),
                                kind(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                            )
                        })
                        .collect(),
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|kv| (kv.key, text(kv.value.and_then(|v| v.value))))
                        .collect(),
                });
            }
        }
    }
    out
}
