//! Benchmarks of the Temporal interpreter against the project's development server (`cargo
//! xtask bench temporal` starts it): what a model call as an activity costs next to a plain
//! SDK workflow calling a no-op activity, a 1,000-branch fan-out next to the SDK joining
//! 1,000 activities (with 1, 2 and 4 worker processes), and rebuilding a workflow of 1,000
//! effects from its history, or from the journal it carried when it continued as new.

// The SDK's workflow and activity macros generate public items without docs.
#![allow(missing_docs)]

use std::path::Path;
use std::time::{Duration, Instant};

use agent_interp_temporal::{Client, StartOptions, Worker, connect, start};
use agent_op::{Op, Prompt, Response, Steering, op};
use agent_provider::ScriptedProvider;
use temporalio_client::{WorkflowGetResultOptions, WorkflowStartOptions};
use temporalio_macros::{activities, workflow, workflow_methods};
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::{ActivityOptions, WorkerOptions, WorkflowContext, WorkflowResult};

#[path = "../../../xtask/src/temporal.rs"]
#[allow(dead_code)]
mod server;

/// Sequential calls per `temporal.step` sample.
const STEPS: u32 = 20;
/// Branches of `temporal.fanout_1k`.
const FANOUT: usize = 1_000;
/// Effects of the workflow `temporal.replay_1k` rebuilds.
const REPLAYED: usize = 1_000;

pub struct NoopActivities;

#[activities]
impl NoopActivities {
    /// Does nothing: the step baseline's activity.
    #[activity]
    pub async fn noop(_ctx: ActivityContext, input: String) -> Result<String, ActivityError> {
        Ok(input)
    }

    /// Waits 10 ms: the fan-out baseline's activity (the model's latency in the subject).
    #[activity]
    pub async fn wait(_ctx: ActivityContext, input: String) -> Result<String, ActivityError> {
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(input)
    }
}

fn activity_options() -> ActivityOptions {
    ActivityOptions::start_to_close_timeout(Duration::from_secs(60))
}

/// The baseline: a plain SDK workflow calling `n` no-op activities one after another.
#[workflow]
#[derive(Default)]
pub struct PlainSteps;

#[workflow_methods]
impl PlainSteps {
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>, n: u32) -> WorkflowResult<u32> {
        for i in 0..n {
            ctx.execute_activity(NoopActivities::noop, format!("{i}"), activity_options())
                .await?;
        }
        Ok(n)
    }
}

/// The baseline: a plain SDK workflow joining `n` concurrent 10 ms activities.
#[workflow]
#[derive(Default)]
pub struct PlainFanout;

#[workflow_methods]
impl PlainFanout {
    #[run]
    pub async fn run(ctx: &mut WorkflowContext<Self>, n: u32) -> WorkflowResult<u32> {
        let calls: Vec<_> = (0..n)
            .map(|i| ctx.execute_activity(NoopActivities::wait, format!("{i}"), activity_options()))
            .collect();
        for result in temporalio_sdk::workflows::join_all(calls).await {
            result?;
        }
        Ok(n)
    }
}

fn steps(n: u32) -> Op<(), u32> {
    op::repeat(u64::from(n), |i| {
        op::infer_raw("m", Prompt::new().user(format!("{i}"))).map(|_| ())
    })
    .map(move |_| n)
}

fn fan_out(n: usize) -> Op<(), usize> {
    op::par(
        (0..n)
            .map(|i| op::infer_raw("m", Prompt::new().user(format!("{i}"))))
            .collect(),
    )
    .map(|replies: Vec<Response>| replies.len())
}

/// After `n` calls, waits for a steering message: the replay benchmark's workflow.
fn calls_then_wait(n: usize) -> Op<(), usize> {
    op::repeat(n as u64, |i| {
        op::infer_raw("m", Prompt::new().user(format!("{i}"))).map(|_| ())
    })
    .then(op::wait_steering(Duration::from_secs(3600)))
    .map(move |_| n)
}

/// Set in the environment of the worker processes `temporal.fanout_1k` starts: the server's
/// address and the task queue, separated by a space.
const WORKER_ENV: &str = "AGENT_TEMPORAL_BENCH_WORKER";

/// Worker processes that serve the fan-out's workflow and calls; killed when dropped. Each
/// also exits by itself when its standard input closes (this process died).
struct Workers(Vec<std::process::Child>);

impl Workers {
    fn start(address: &str, queue: &str, n: usize) -> Workers {
        let exe = std::env::current_exe().unwrap();
        Workers(
            (0..n)
                .map(|_| {
                    std::process::Command::new(&exe)
                        .env(WORKER_ENV, format!("{address} {queue}"))
                        .stdin(std::process::Stdio::piped())
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A worker process: the fan-out program, its model answering in 10 ms.
fn serve(spec: &str) {
    let (address, queue) = spec.split_once(' ').unwrap();
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = connect(address).await.unwrap();
        Worker::new(client, queue)
            .provider(instant().with_latency(Duration::from_millis(10)))
            .program("fan_out", fan_out)
            // Several workers of one task queue in processes of one executable.
            .build_id(format!("bench-{}", std::process::id()))
            .run(std::future::pending())
            .await
            .unwrap();
    });
}

fn instant() -> ScriptedProvider {
    ScriptedProvider::from_fn(|_, _| Ok(Response::text("ok")))
}

fn id(prefix: &str) -> String {
    format!("{prefix}-{:016x}", fastrand::u64(..))
}

async fn plain(client: &Client, queue: &str, fan_out: bool, n: u32) -> Duration {
    let started = Instant::now();
    let options = WorkflowStartOptions::new(queue.to_owned(), id("plain")).build();
    let result = if fan_out {
        client
            .start_workflow(PlainFanout::run, n, options)
            .await
            .unwrap()
            .get_result(WorkflowGetResultOptions::default())
            .await
    } else {
        client
            .start_workflow(PlainSteps::run, n, options)
            .await
            .unwrap()
            .get_result(WorkflowGetResultOptions::default())
            .await
    };
    assert_eq!(result.unwrap(), n);
    started.elapsed()
}

async fn ours<A: serde::de::DeserializeOwned>(
    client: &Client,
    queue: &str,
    program: &str,
    input: u64,
) -> Duration {
    let started = Instant::now();
    let handle = start(client, program, input, StartOptions::new(queue))
        .await
        .unwrap();
    handle.result::<(), A>().await.unwrap();
    started.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn measure(client: &Client, address: &str, queue: &str, plain_queue: &str) {
    if bench_kit::enabled("temporal.step") {
        let (mut subject, mut baseline) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            subject.push(ours::<u32>(client, queue, "steps", u64::from(STEPS)).await);
            baseline.push(plain(client, plain_queue, false, STEPS).await);
        }
        let per = |d: Duration| bench_kit::ms(d) / f64::from(STEPS);
        bench_kit::report(
            "temporal.step",
            per(median(subject)),
            "ms/call",
            per(median(baseline)),
        );
    }
    if bench_kit::enabled("temporal.fanout_1k") {
        let mut baseline = Vec::new();
        for _ in 0..2 {
            baseline.push(plain(client, plain_queue, true, FANOUT as u32).await);
        }
        let baseline = median(baseline);
        let mut one_worker = baseline;
        for processes in [1, 2, 4] {
            let queue = id("fanout");
            let workers = Workers::start(address, &queue, processes);
            let mut subject = Vec::new();
            for _ in 0..2 {
                subject.push(ours::<usize>(client, &queue, "fan_out", FANOUT as u64).await);
            }
            drop(workers);
            let subject = median(subject);
            let name = match processes {
                1 => {
                    one_worker = subject;
                    "temporal.fanout_1k".to_owned()
                }
                n => format!("temporal.fanout_1k_{n}_workers"),
            };
            bench_kit::report(&name, bench_kit::ms(subject), "ms", bench_kit::ms(baseline));
            let rate = |d: Duration| FANOUT as f64 / d.as_secs_f64();
            bench_kit::report(
                &format!("{name}_branches_per_s"),
                rate(subject),
                "branches/s",
                rate(baseline),
            );
        }
        let subject = one_worker;
        // The same program in one process, for scale.
        let config = agent_interp_par::Config::new()
            .provider(instant().with_latency(Duration::from_millis(10)));
        let started = Instant::now();
        agent_interp_par::run(&config, (), fan_out(FANOUT))
            .await
            .unwrap();
        bench_kit::report(
            "temporal.fanout_1k_in_process",
            bench_kit::ms(started.elapsed()),
            "ms",
            bench_kit::ms(subject),
        );
    }
}

/// `temporal.replay_1k`: a workflow makes 1,000 calls on one worker, then waits for a steering
/// message; that worker stops and a fresh one (nothing cached) takes over, so the message makes
/// it rebuild the workflow from its history (thousands of events) before the run can end.
/// Baseline: the same message to a workflow still cached by the worker that ran it.
async fn replay(client: &Client) {
    if !bench_kit::enabled("temporal.replay_1k") {
        return;
    }
    let mut figures = Vec::new();
    // Rebuilt from its history; cached; rebuilt after it continued as new at its 1,000th
    // call (a short history, and the journal it carries).
    for (rebuilt, hand_over) in [(true, false), (false, false), (true, true)] {
        let queue = id("replay");
        let worker = || {
            Worker::new(client.clone(), queue.clone())
                .provider(instant())
                .continue_as_new_after(hand_over.then_some(REPLAYED))
                .program("calls_then_wait", calls_then_wait)
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let first = worker().run(async move {
            let _ = stopped.await;
        });
        let handle = start(
            client,
            "calls_then_wait",
            REPLAYED,
            StartOptions::new(queue.clone()),
        )
        .await
        .unwrap();
        let waiting = async {
            // Until the calls are done and the program waits.
            loop {
                let handed_over = handle.run_ids().await.unwrap().len() > 1;
                let trace = handle.trace().await.unwrap();
                if trace.infer_calls() >= REPLAYED && handed_over == hand_over {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            if rebuilt {
                let _ = stop.send(());
                None
            } else {
                let started = Instant::now();
                handle.steer(Steering::new("end")).await.unwrap();
                handle.result::<(), usize>().await.unwrap();
                let took = started.elapsed();
                let _ = stop.send(());
                Some(took)
            }
        };
        let (ran, took) = tokio::join!(first, waiting);
        ran.unwrap();
        let took = match took {
            Some(took) => took,
            None => {
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let second = worker().run(async move {
                    let _ = stopped.await;
                });
                let timed = async {
                    let started = Instant::now();
                    handle.steer(Steering::new("end")).await.unwrap();
                    handle.result::<(), usize>().await.unwrap();
                    let took = started.elapsed();
                    let _ = stop.send(());
                    took
                };
                let (ran, took) = tokio::join!(second, timed);
                ran.unwrap();
                took
            }
        };
        figures.push(took);
    }
    bench_kit::report(
        "temporal.replay_1k",
        bench_kit::ms(figures[0]),
        "ms",
        bench_kit::ms(figures[1]),
    );
    bench_kit::report(
        "temporal.replay_1k_handed_over",
        bench_kit::ms(figures[2]),
        "ms",
        bench_kit::ms(figures[1]),
    );
}

fn main() {
    if let Ok(spec) = std::env::var(WORKER_ENV) {
        return serve(&spec);
    }
    let wanted = ["temporal.step", "temporal.fanout_1k", "temporal.replay_1k"];
    if !wanted.iter().any(|name| bench_kit::enabled(name)) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let address = match server::ensure_running(&server::target_dir(&root)) {
        Ok(address) => address,
        Err(why) => {
            eprintln!("SKIPPED: temporal benchmarks: no Temporal server: {why}");
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = connect(&address).await.unwrap();
        let queue = id("bench");
        let plain_queue = id("plain");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut stopped_subject = stopped.clone();
        let subject = Worker::new(client.clone(), queue.clone())
            .provider(instant())
            .program("steps", steps)
            .run(async move {
                let _ = stopped_subject.wait_for(|s| *s).await;
            });
        let sdk_runtime = temporalio_sdk::Runtime::from_current_tokio(Default::default()).unwrap();
        let options = WorkerOptions::new(plain_queue.clone())
            .register_activities(NoopActivities)
            .register_workflow::<PlainSteps>()
            .unwrap()
            .register_workflow::<PlainFanout>()
            .unwrap()
            .build();
        let mut baseline =
            temporalio_sdk::Worker::new(&sdk_runtime, client.clone(), options).unwrap();
        let stop_baseline = baseline.shutdown_handle();
        let mut stopped_baseline = stopped.clone();
        let measured = async {
            measure(&client, &address, &queue, &plain_queue).await;
            let _ = stop.send(true);
        };
        let baseline_stopper = async move {
            let _ = stopped_baseline.wait_for(|s| *s).await;
            stop_baseline();
        };
        let (ran, ran_baseline, (), ()) =
            tokio::join!(subject, baseline.run(), measured, baseline_stopper);
        ran.unwrap();
        ran_baseline.unwrap();
        replay(&client).await;
    });
}
