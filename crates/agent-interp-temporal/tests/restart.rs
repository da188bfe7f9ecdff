//! The Temporal server restarts in the middle of a run; the run completes. Uses a server of
//! its own (under `target/restart/temporal`), so other tests keep theirs.

mod support;

use std::path::Path;
use std::time::Duration;

use agent_interp_temporal::{StartOptions, Worker, connect, start};
use agent_op::{Op, Prompt, Response, op};
use agent_provider::ScriptedProvider;

use support::server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_completes_across_a_server_restart() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let Ok(why) = std::env::var(server::UNAVAILABLE_ENV) {
        eprintln!("SKIPPED: a_run_completes_across_a_server_restart: no Temporal server: {why}");
        return;
    }
    let own = server::Server::new(&server::target_dir(&root).join("restart"));
    let address = match own.start() {
        Ok(started) => started.address,
        Err(why) => {
            eprintln!(
                "SKIPPED: a_run_completes_across_a_server_restart: no Temporal server: {why}"
            );
            return;
        }
    };
    let client = connect(&address).await.unwrap();
    let queue = support::task_queue("restart");
    let model = ScriptedProvider::from_fn(|_, p| {
        let last = p
            .messages
            .last()
            .map(|m| m.content().to_owned())
            .unwrap_or_default();
        Ok(Response::text(format!("echo: {last}")))
    })
    .with_latency(Duration::from_millis(200));
    let program = |n: usize| -> Op<(), Vec<String>> {
        op::sequence(
            (0..n)
                .map(|i| {
                    op::infer_raw("m", Prompt::new().user(format!("step {i}"))).map(|r| r.content)
                })
                .collect(),
        )
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = Worker::new(client.clone(), queue.clone())
        .provider(model)
        .heartbeat_timeout(Duration::from_secs(2))
        .program("steps", program)
        .run(async move {
            let _ = stopped.await;
        });
    let test = async {
        let handle = start(&client, "steps", 20usize, StartOptions::new(queue.clone()))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let restart = tokio::task::spawn_blocking(move || {
            own.stop().unwrap();
            let again = own.start().unwrap();
            (own, again.address)
        });
        let (own, again) = restart.await.unwrap();
        assert_eq!(again, address, "the server came back on its port");
        let outcome =
            tokio::time::timeout(Duration::from_secs(240), handle.result::<(), Vec<String>>())
                .await
                .expect("the run ends after the restart")
                .unwrap();
        let expected: Vec<String> = (0..20).map(|i| format!("echo: step {i}")).collect();
        assert_eq!(outcome.value, expected);
        let _ = stop.send(());
        own
    };
    let (ran, own) = tokio::join!(worker, test);
    ran.unwrap();
    let _ = tokio::task::spawn_blocking(move || own.stop()).await;
}
