//! The built-in tools a spec can offer: `read_file` under one directory and `http_get` to
//! allowed hosts. Both refuse anything outside what the spec grants, as tool errors the
//! model is shown.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_agents::{TypedTool, tool};
use agent_op::ToolError;

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
    let bytes = tokio::fs::read(&real)
        .await
        .map_err(|e| ToolError::failed(format!("cannot read `{path}`: {e}")))?;
    let cut = bytes.len() > MAX_FILE_BYTES;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_FILE_BYTES)]).into_owned();
    Ok(if cut {
        format!(
            "{text}\n[… cut at {MAX_FILE_BYTES} bytes of {}]",
            bytes.len()
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
/// returns the status and the start of the body.
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
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    if !allow.contains(&host) {
        return Err(ToolError::denied(format!(
            "the host `{host}` is not allowed (allowed: {})",
            allow.join(", ")
        )));
    }
    let response = client
        .get(parsed)
        .send()
        .await
        .map_err(|e| ToolError::failed(format!("fetching `{url}` failed: {e}")))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| ToolError::failed(format!("reading `{url}` failed: {e}")))?;
    let text = String::from_utf8_lossy(&body[..body.len().min(MAX_BODY_BYTES)]);
    Ok(format!("HTTP {status}\n\n{text}"))
}
