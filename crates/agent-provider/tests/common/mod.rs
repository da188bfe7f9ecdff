//! A small HTTP/1.1 server on 127.0.0.1 for the provider tests and benchmarks.
//!
//! It speaks just enough HTTP (keep-alive, Content-Length request bodies, fixed-length and
//! chunked responses) and gives the tests what a real server would not: control over chunk
//! boundaries and timing, truncated bodies, and a server that never answers. Every request is
//! recorded so tests can assert what the clients sent.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("the request body is JSON")
    }
}

/// How to answer a request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete response with `Content-Length`.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A chunked response: each piece is written as one HTTP chunk, `delay` apart. With
    /// `truncate`, the connection is closed before the terminating chunk.
    Chunked {
        status: u16,
        headers: Vec<(String, String)>,
        pieces: Vec<Vec<u8>>,
        delay: Duration,
        truncate: bool,
    },
    /// Headers promising `Content-Length: promised`, then `body` (shorter), then close.
    ShortBody {
        status: u16,
        promised: usize,
        body: Vec<u8>,
    },
    /// Reads the request and never answers.
    Hang,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Reply {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    pub fn text(status: u16, body: &str) -> Reply {
        Reply::Full {
            status,
            headers: vec![("content-type".into(), "text/plain".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// Adds a header to a `Full` or `Chunked` reply.
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        match &mut self {
            Reply::Full { headers, .. } | Reply::Chunked { headers, .. } => {
                headers.push((name.into(), value.into()))
            }
            _ => {}
        }
        self
    }

    /// A server-sent event stream sent as the given pieces.
    pub fn sse(pieces: Vec<Vec<u8>>) -> Reply {
        Reply::Chunked {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            pieces,
            delay: Duration::ZERO,
            truncate: false,
        }
    }

    /// An NDJSON stream sent as the given pieces.
    pub fn ndjson(pieces: Vec<Vec<u8>>) -> Reply {
        Reply::Chunked {
            status: 200,
            headers: vec![("content-type".into(), "application/x-ndjson".into())],
            pieces,
            delay: Duration::ZERO,
            truncate: false,
        }
    }

    /// Makes a chunked reply stop before its end by closing the connection.
    pub fn truncated(mut self) -> Reply {
        if let Reply::Chunked { truncate, .. } = &mut self {
            *truncate = true;
        }
        self
    }

    /// Waits `d` before each piece of a chunked reply.
    pub fn paced(mut self, d: Duration) -> Reply {
        if let Reply::Chunked { delay, .. } = &mut self {
            *delay = d;
        }
        self
    }
}

type Handler = dyn Fn(&Request, usize) -> Reply + Send + Sync;

/// A running server; it stops with the test's runtime.
pub struct TestServer {
    addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl TestServer {
    /// Starts a server answering the `n`th request (from 0) with `handler(request, n)`.
    pub async fn start(
        handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let recorded = requests.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, handler.clone(), recorded.clone()));
            }
        });
        TestServer { addr, requests }
    }

    /// A server answering every request with `reply`.
    pub async fn always(reply: Reply) -> TestServer {
        TestServer::start(move |_, _| reply.clone()).await
    }

    /// A server answering the requests with `replies` in order (the last one repeats).
    pub async fn sequence(replies: Vec<Reply>) -> TestServer {
        TestServer::start(move |_, n| replies[n.min(replies.len() - 1)].clone()).await
    }

    /// `http://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// The only request received; panics if there were more or none.
    pub fn only_request(&self) -> Request {
        let requests = self.requests();
        assert_eq!(requests.len(), 1, "expected exactly one request");
        requests.into_iter().next().unwrap()
    }
}

async fn serve(mut stream: TcpStream, handler: Arc<Handler>, requests: Arc<Mutex<Vec<Request>>>) {
    let mut buffer = Vec::with_capacity(8192);
    loop {
        let Some(request) = read_request(&mut stream, &mut buffer).await else {
            return;
        };
        let n = {
            let mut all = requests.lock().unwrap();
            all.push(request.clone());
            all.len() - 1
        };
        let keep_open = write_reply(&mut stream, handler(&request, n)).await;
        if !keep_open {
            return;
        }
    }
}

/// Reads one request; `None` when the client closed the connection.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = find(buffer, b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let body_start = head_end + 4;
    while buffer.len() < body_start + length {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
    let body = buffer[body_start..body_start + length].to_vec();
    buffer.drain(..body_start + length);
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn status_line(status: u16) -> String {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    };
    format!("HTTP/1.1 {status} {reason}\r\n")
}

/// Writes `reply`; returns whether the connection can serve another request.
async fn write_reply(stream: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut out = status_line(status).into_bytes();
            for (n, v) in headers {
                out.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
            }
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(&body);
            stream.write_all(&out).await.is_ok()
        }
        Reply::Chunked {
            status,
            headers,
            pieces,
            delay,
            truncate,
        } => {
            let mut head = status_line(status);
            for (n, v) in headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            if stream.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            for piece in pieces {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if piece.is_empty() {
                    continue;
                }
                let mut chunk = format!("{:x}\r\n", piece.len()).into_bytes();
                chunk.extend_from_slice(&piece);
                chunk.extend_from_slice(b"\r\n");
                if stream.write_all(&chunk).await.is_err() || stream.flush().await.is_err() {
                    return false;
                }
            }
            if truncate {
                let _ = stream.shutdown().await;
                return false;
            }
            stream.write_all(b"0\r\n\r\n").await.is_ok()
        }
        Reply::ShortBody {
            status,
            promised,
            body,
        } => {
            let mut out = status_line(status).into_bytes();
            out.extend_from_slice(
                format!("content-type: application/json\r\ncontent-length: {promised}\r\n\r\n")
                    .as_bytes(),
            );
            out.extend_from_slice(&body);
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
            false
        }
        Reply::Hang => {
            std::future::pending::<()>().await;
            false
        }
    }
}

/// An SSE body: each JSON value or raw string as one `data:` event, then `data: [DONE]`.
pub fn sse_events(events: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        out.extend_from_slice(format!("data: {e}\n\n").as_bytes());
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// An NDJSON body: one line per value.
pub fn ndjson_lines(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for l in lines {
        out.extend_from_slice(l.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// `bytes` cut into pieces of `size` bytes (the last may be shorter).
pub fn pieces(bytes: &[u8], size: usize) -> Vec<Vec<u8>> {
    bytes.chunks(size.max(1)).map(<[u8]>::to_vec).collect()
}
