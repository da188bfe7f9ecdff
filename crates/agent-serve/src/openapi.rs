//! `GET /openapi.json`: the server's OpenAPI 3.1 document. Each protocol module lists its
//! operations ([`Operation`]); request bodies' schemas are generated from the wire types
//! (schemars, JSON Schema 2020-12, as OpenAPI 3.1 uses), response schemas are written
//! beside the code that builds the responses.

use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

/// One route's operation.
pub(crate) struct Operation {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) summary: &'static str,
    pub(crate) tag: &'static str,
    /// The JSON request body's schema (`None`: no body).
    pub(crate) body: Option<Value>,
    /// The query parameters: name and schema.
    pub(crate) query: Vec<(&'static str, Value)>,
    /// The success status, its content type and schema.
    pub(crate) ok: (&'static str, &'static str, Value),
    /// Whether errors have OpenAI's body (else the Agent Protocol's).
    pub(crate) openai_errors: bool,
}

impl Operation {
    pub(crate) fn new(
        method: &'static str,
        path: impl Into<String>,
        tag: &'static str,
        summary: &'static str,
    ) -> Operation {
        Operation {
            method,
            path: path.into(),
            summary,
            tag,
            body: None,
            query: Vec::new(),
            ok: ("200", "application/json", json!({})),
            openai_errors: false,
        }
    }

    pub(crate) fn body(mut self, schema: impl Into<Value>) -> Operation {
        self.body = Some(schema.into());
        self
    }

    pub(crate) fn query(mut self, name: &'static str, schema: Value) -> Operation {
        self.query.push((name, schema));
        self
    }

    pub(crate) fn ok(
        mut self,
        status: &'static str,
        content: &'static str,
        schema: Value,
    ) -> Operation {
        self.ok = (status, content, schema);
        self
    }

    pub(crate) fn openai(mut self) -> Operation {
        self.openai_errors = true;
        self
    }
}

/// The schema generator request bodies are described with (definitions under
/// `#/components/schemas`).
pub(crate) fn generator() -> SchemaGenerator {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    settings.into_generator()
}

/// The document for `operations`, with the schemas `generator` collected.
pub(crate) fn document(
    operations: Vec<Operation>,
    mut generator: SchemaGenerator,
    keys: bool,
) -> Value {
    let mut schemas = generator.take_definitions(true);
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "description": "An error: a stable code and a message for people",
            "properties": {
                "error": {"type": "string"},
                "message": {"type": "string"},
                "detail": {"type": "string"}
            },
            "required": ["error", "message"]
        }),
    );
    schemas.insert(
        "OpenAiError".into(),
        json!({
            "type": "object",
            "properties": {"error": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "param": {"type": ["string", "null"]},
                    "code": {"type": ["string", "null"]}
                },
                "required": ["message", "type", "param", "code"]
            }},
            "required": ["error"]
        }),
    );
    let mut paths = Map::new();
    for op in operations {
        let mut parameters: Vec<Value> = op
            .path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        parameters.extend(
            op.query
                .iter()
                .map(|(name, schema)| json!({"name": name, "in": "query", "required": false, "schema": schema})),
        );
        let error = if op.openai_errors {
            "OpenAiError"
        } else {
            "Error"
        };
        let error = json!({"description": "refused: the body names what is wrong",
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{error}")}}}});
        let (status, content, schema) = op.ok;
        let mut responses = Map::new();
        responses.insert(
            status.into(),
            json!({"description": "success", "content": {content: {"schema": schema}}}),
        );
        responses.insert("4XX".into(), error.clone());
        responses.insert("503".into(), error);
        let mut operation = json!({
            "summary": op.summary,
            "tags": [op.tag],
            "operationId": format!("{}{}", op.method, op.path.replace(['/', '{', '}', '.', '-'], "_")),
            "parameters": parameters,
            "responses": responses,
        });
        if let Some(body) = op.body {
            operation["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": body}}});
        }
        if !keys || op.path == "/healthz" || op.path == "/readyz" || op.path == "/" {
            operation["security"] = json!([]);
        }
        let entry = paths.entry(op.path.clone()).or_insert_with(|| json!({}));
        entry[op.method] = operation;
    }
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agent serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Agents behind HTTP: the Agent Protocol's runs, threads and event streams (as LangGraph's server serves them), OpenAI's chat and Responses APIs, traces. See docs/SERVE.md.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}
            }
        }
    });
    if keys {
        document["security"] = json!([{"bearer": []}, {"apiKey": []}]);
    }
    document
}

/// A JSON object with these properties (more allowed).
pub(crate) fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// The server's document: every protocol's operations and the server's own routes.
pub(crate) fn served(keys: bool) -> Value {
    let mut generator = generator();
    let mut operations = crate::protocol::agent_protocol::operations(&mut generator);
    operations.extend(crate::protocol::openai::operations(&mut generator));
    operations.extend(crate::protocol::ag_ui::operations(&mut generator));
    let status = object(json!({"status": {"type": "string"}}), &["status"]);
    operations.push(
        Operation::new("get", "/healthz", "health", "Whether the server runs").ok(
            "200",
            "application/json",
            status.clone(),
        ),
    );
    operations.push(
        Operation::new("get", "/readyz", "health", "Whether the store answers").ok(
            "200",
            "application/json",
            status,
        ),
    );
    operations.push(Operation::new("get", "/", "chat", "The chat page").ok(
        "200",
        "text/html",
        json!({"type": "string"}),
    ));
    operations.push(
        Operation::new("get", "/openapi.json", "openapi", "This document").ok(
            "200",
            "application/json",
            json!({"type": "object"}),
        ),
    );
    document(operations, generator, keys)
}
