//! OTLP/HTTP export for real: an in-process OTLP receiver on 127.0.0.1 decodes what the
//! exporter sends (protobuf, with `opentelemetry-proto`), and the test checks the spans of an
//! agent run: their names, parent/child shape and `gen_ai.*` attributes.

#[path = "support/receiver.rs"]
mod receiver;
#[path = "support/run.rs"]
mod run;

use std::collections::HashMap;
#[cfg(feature = "grpc")]
use std::sync::{Arc, Mutex};

use agent_otel::Otel;
#[cfg(feature = "grpc")]
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use receiver::{Received, Receiver};
use run::{SPANS, SPANS_DEBUG, config, program};
use tracing_subscriber::layer::SubscriberExt;

fn check(spans: &[Received], service: &str) {
    // Exported at `DEBUG`, the run's structure (fork, branches) is there too.
    let debug = spans.len() == SPANS_DEBUG;
    let by_id: HashMap<&[u8], &Received> =
        spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent = |s: &Received| by_id.get(s.parent_span_id.as_slice()).copied();
    assert!(spans.iter().all(|s| s.service == service), "{spans:#?}");
    let root = spans
        .iter()
        .find(|s| s.name == "invoke_agent exporter-test")
        .unwrap_or_else(|| panic!("no root span in {spans:#?}"));
    assert!(root.parent_span_id.is_empty());
    assert_eq!(root.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(root.attributes["gen_ai.agent.name"], "exporter-test");
    assert!(root.attributes.contains_key("effect_agents.trace_id"));
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id));

    let chats: Vec<&Received> = spans.iter().filter(|s| s.name == "chat small").collect();
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        assert_eq!(chat.attributes["gen_ai.operation.name"], "chat");
        assert_eq!(chat.attributes["gen_ai.provider.name"], "scripted");
        assert_eq!(chat.attributes["gen_ai.request.model"], "small");
        assert_eq!(chat.attributes["gen_ai.usage.input_tokens"], "11");
        assert_eq!(chat.attributes["gen_ai.usage.output_tokens"], "3");
        // Counts are numbers, not text, so backends can add them up.
        assert_eq!(chat.kinds["gen_ai.usage.input_tokens"], "int", "{chat:?}");
        assert_eq!(chat.kinds["effect_agents.event.first"], "int");
        // The conventions' string array, not its JSON text.
        assert_eq!(
            chat.kinds["gen_ai.response.finish_reasons"], "array",
            "{chat:?}"
        );
        assert!(
            chat.attributes["gen_ai.response.finish_reasons"].starts_with("[\""),
            "{chat:?}"
        );
        if debug {
            // chat → branch → fork (par) → run.
            let branch = parent(chat).expect("a branch span");
            assert_eq!(branch.name, "branch");
            let fork = parent(branch).expect("a fork span");
            assert_eq!(fork.name, "par");
            assert_eq!(
                parent(fork).map(|r| r.span_id.clone()),
                Some(root.span_id.clone())
            );
        } else {
            // At the default level the structure is left out: chat → run.
            assert_eq!(
                parent(chat).map(|r| r.span_id.clone()),
                Some(root.span_id.clone())
            );
        }
    }
    if debug {
        assert_ne!(
            parent(chats[0]).unwrap().span_id,
            parent(chats[1]).unwrap().span_id,
            "each model call has its own branch"
        );
    } else {
        assert!(spans.iter().all(|s| s.name != "par" && s.name != "branch"));
    }
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool lookup")
        .expect("a tool span");
    assert_eq!(tool.attributes["gen_ai.tool.name"], "lookup");
    assert_eq!(tool.attributes["gen_ai.tool.call.id"], "call-1");
    assert_eq!(
        parent(tool).map(|r| r.span_id.clone()),
        Some(root.span_id.clone())
    );
    // Contents were not opted in.
    assert!(
        chats
            .iter()
            .all(|c| !c.attributes.contains_key("gen_ai.input.messages"))
    );
}

#[test]
fn spans_reach_an_otlp_http_receiver_with_their_shape_and_genai_attributes() {
    let receiver = Receiver::start();
    let (layer, guard) = Otel::new("otel-test")
        .endpoint(receiver.url())
        .level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .build()
        .unwrap();
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(agent_interp_par::run(
            &config("exporter-test"),
            (),
            program(),
        ))
        .unwrap();
    });
    guard.shutdown().unwrap();
    let spans = receiver.wait_for(SPANS_DEBUG);
    assert_eq!(spans.len(), SPANS_DEBUG, "{spans:#?}");
    check(&spans, "otel-test");
}

const CHILD: &str = "AGENT_OTEL_TEST_CHILD";

/// `agent_otel::init` as a service would call it: endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// global subscriber, flush on drop. Runs in a child process, which owns its global state and
/// its environment.
#[test]
fn init_reads_the_standard_variables_and_flushes_on_drop() {
    if std::env::var_os(CHILD).is_some() {
        let _telemetry = agent_otel::init("otel-init-test").unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(agent_interp_par::run(
            &config("exporter-test"),
            (),
            program(),
        ))
        .unwrap();
        // A second global subscriber is refused, clearly.
        let again = agent_otel::init("again").unwrap_err();
        assert!(again.to_string().contains("already installed"), "{again}");
        return;
    }
    let receiver = Receiver::start();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "init_reads_the_standard_variables_and_flushes_on_drop",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .status()
        .unwrap();
    assert!(status.success());
    let spans = receiver.wait_for(SPANS);
    assert_eq!(spans.len(), SPANS, "{spans:#?}");
    check(&spans, "otel-init-test");
}

/// An OTLP/gRPC receiver (tonic) on a free port of 127.0.0.1, on a runtime of its own.
#[cfg(feature = "grpc")]
mod grpc {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use receiver::decode;

    struct Collector(Arc<Mutex<Vec<Received>>>);

    #[async_trait::async_trait]
    impl TraceService for Collector {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            self.0.lock().unwrap().extend(decode(request.into_inner()));
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    #[test]
    fn spans_reach_an_otlp_grpc_receiver_too() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        rt.spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Collector(spans.clone())))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        // tonic's channel lives on the runtime it is built in.
        let (layer, guard) = {
            let _entered = rt.enter();
            Otel::new("otel-grpc-test")
                .protocol(agent_otel::Protocol::Grpc)
                .endpoint(format!("http://127.0.0.1:{port}"))
                .build()
                .unwrap()
        };
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let run = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            run.block_on(agent_interp_par::run(
                &config("exporter-test"),
                (),
                program(),
            ))
            .unwrap();
        });
        guard.shutdown().unwrap();
        let received = spans.lock().unwrap().clone();
        assert_eq!(received.len(), SPANS, "{received:#?}");
        check(&received, "otel-grpc-test");
    }
}
