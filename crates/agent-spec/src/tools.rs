//! The built-in tools a spec can offer (`[tools.read_file]`, `[tools.http_get]`):
//! `read_file` under one directory and `http_get` to allowed hosts. Both refuse anything
//! outside what the spec grants, as tool errors the model is shown. [`toolbox`](crate::toolbox)
//! builds them from a spec; they are here for programs that want them alone.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_agents::{TypedTool, tool};
use agent_op::ToolError;
use tokio::io::AsyncReadExt;

/// Arguments of `read_file`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ReadFileArgs {
    /// The file, relative to the tool's root directory.
    pub path: String,
}

/// Files larger than this are cut, with a note saying so.
const MAX_FILE_BYTES: usize = 256 * 1024;

/// `read_file`: reads a UTF-8 file under `root` (capability `fs.read`). Absolute paths,
/// `..` and links that lead outside the root are refused.
pub fn read_file(root: &Path) -> Result<TypedTool<ReadFileArgs, String>, std::io::Error> {
    let root = Arc::new(root.canonicalize()?);
    // The description names no absolute path: prompts (and recorded cassettes) must not
    // depend on where the files happen to live.
    let described =
        "Reads a UTF-8 text file from the readable directory (give a path relative to it)";
    Ok(tool("read_file", described, move |args: ReadFileArgs| {
        let root = root.clone();
        async move { read_under(&root, &args.path).await }
    })
    .read_only()
    .timeout(Duration::from_secs(10))
    .needs("fs.read"))
}

async fn read_under(root: &Path, path: &str) -> Result<String, ToolError> {
    let relative = Path::new(path);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)))
    {
        return Err(ToolError::denied(format!(
            "`{path}` is outside the readable directory (give a path relative to it, without `..`)"
        )));
    }
    let joined: PathBuf = root.join(relative);
    let real = tokio::fs::canonicalize(&joined)
        .await
        .map_err(|e| ToolError::failed(format!("cannot read `{path}`: {e}")))?;
    // A symbolic link may still lead out.
    if !real.starts_with(root) {
        return Err(ToolError::denied(format!(
            "`{path}` leads outside the readable directory"
        )));
    }
    let cannot = |e: std::io::Error| ToolError::failed(format!("cannot read `{path}`: {e}"));
    let metadata = tokio::fs::metadata(&real).await.map_err(cannot)?;
    // A FIFO or a device could block the read forever, or never end.
    if !metadata.is_file() {
        return Err(ToolError::denied(format!("`{path}` is not a regular file")));
    }
    let file = tokio::fs::File::open(&real).await.map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64)
        .read_to_end(&mut bytes)
        .await
        .map_err(cannot)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(if metadata.len() > MAX_FILE_BYTES as u64 {
        format!(
            "{text}\n[… cut at {MAX_FILE_BYTES} bytes of {}]",
            metadata.len()
        )
    } else {
        text
    })
}

/// Arguments of `http_get`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct HttpGetArgs {
    /// The URL (http or https) to fetch.
    pub url: String,
}

/// Bodies longer than this are cut.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// `http_get`: fetches a URL whose host is in `allow` (capability `net`), within 20 s;
/// returns the status and the start of the body. An entry `host` allows the scheme's usual
/// port (80, 443); `host:port` allows that port.
pub fn http_get(allow: &[String]) -> Result<TypedTool<HttpGetArgs, String>, reqwest::Error> {
    let allow: Arc<[String]> = allow.iter().map(|h| h.to_ascii_lowercase()).collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(10))
        // A redirect could leave the allowed hosts.
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let described = format!(
        "Fetches a web page by HTTP GET; allowed hosts: {}",
        allow.join(", ")
    );
    Ok(tool("http_get", described, move |args: HttpGetArgs| {
        let (allow, client) = (allow.clone(), client.clone());
        async move { fetch(&client, &allow, &args.url).await }
    })
    .read_only()
    .timeout(Duration::from_secs(25))
    .needs("net"))
}

async fn fetch(client: &reqwest::Client, allow: &[String], url: &str) -> Result<String, ToolError> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| ToolError::invalid_arguments(format!("`{url}` is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ToolError::denied(format!(
            "only http and https URLs can be fetched, not `{}`",
            parsed.scheme()
        )));
    }
    let host = parsed
        .host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let port = parsed.port_or_known_default().unwrap_or(0);
    // `host` allows its scheme's usual port; `host:port` allows that port.
    let usual_port = parsed.port().is_none();
    let bare = |h: &str| h.trim_start_matches('[').trim_end_matches(']').to_owned();
    let allowed = allow.iter().any(|entry| match entry.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.ends_with(':') && p.parse::<u16>().is_ok() => {
            bare(h) == host && p.parse::<u16>().is_ok_and(|p| p == port)
        }
        _ => bare(entry) == host && usual_port,
    });
    if !allowed {
        return Err(ToolError::denied(format!(
            "`{host}` (port {port}) is not allowed (allowed: {})",
            allow.join(", ")
        )));
    }
    let response = client
        .get(parsed)
        .send()
        .await
        .map_err(|e| ToolError::failed(format!("fetching `{url}` failed: {e}")))?;
    let status = response.status();
    let mut response = response;
    let mut body = Vec::new();
    // Read no more than is kept: a huge or endless body costs nothing past the cut.
    while body.len() < MAX_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => return Err(ToolError::failed(format!("reading `{url}` failed: {e}"))),
        }
    }
    body.truncate(MAX_BODY_BYTES);
    let text = String::from_utf8_lossy(&body);
    Ok(format!("HTTP {status}\n\n{text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn http_get_keeps_to_its_hosts_and_ports_and_reads_only_what_it_keeps() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request).await;
                let body = vec![b'x'; 1_000_000];
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            }
        });
        let allow = vec![format!("127.0.0.1:{port}"), "example.com".to_owned()];
        let page = fetch(&client(), &allow, &format!("http://127.0.0.1:{port}/"))
            .await
            .unwrap();
        assert!(page.starts_with("HTTP 200"), "{page}");
        assert!(page.len() < MAX_BODY_BYTES + 100, "cut at {MAX_BODY_BYTES}");
        for refused in [
            "http://127.0.0.1:6379/".to_owned(),
            "http://example.com:8080/".to_owned(),
            format!("http://127.0.0.1:{port}@evil.test/"),
            "http://evil.test/?u=example.com".to_owned(),
            "file:///etc/passwd".to_owned(),
        ] {
            let error = fetch(&client(), &allow, &refused).await.unwrap_err();
            assert_eq!(
                error.kind,
                agent_op::ToolErrorKind::Denied,
                "{refused}: {error}"
            );
        }
    }

    #[tokio::test]
    async fn read_file_refuses_what_is_not_a_regular_file_under_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.txt"), "alpha").unwrap();
        assert_eq!(read_under(&root, "a.txt").await.unwrap(), "alpha");
        let fifo = root.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let error = read_under(&root, "pipe").await.unwrap_err();
            assert!(error.message.contains("not a regular file"), "{error}");
        }
        for outside in ["/etc/passwd", "../x", "a/../../x"] {
            let error = read_under(&root, outside).await.unwrap_err();
            assert_eq!(error.kind, agent_op::ToolErrorKind::Denied, "{outside}");
        }
        let big = "y".repeat(MAX_FILE_BYTES + 10);
        std::fs::write(root.join("big.txt"), &big).unwrap();
        let text = read_under(&root, "big.txt").await.unwrap();
        assert!(text.contains("cut at"), "the cut is said");
        assert!(text.len() < MAX_FILE_BYTES + 100);
    }
}
