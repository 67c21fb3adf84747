//! The executors the sim backend runs: any Rust executor in process, behind
//! [`SimExecutor`]; the reference executor is one.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use executor::world::Transport;
use scenarios::IntentSpec;

use crate::phase_engine::StateChange;
use results::Claim;

/// A boxed future, so that executors can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a proposal was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The executor does not support the action: the intent is reported `unsupported`.
    Unsupported(String),
    /// Any other refusal: the executor is broken.
    Other(String),
}

/// An executor under test, in process.
pub trait SimExecutor: Send {
    /// Records the intent durably, or refuses it.
    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>>;
    /// Works until nothing is recorded or submitted, or `timeout_ms` passes.
    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>>;
    /// One reconciliation pass.
    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>>;
    /// Every intent it knows, with its state.
    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>>;
    /// What takes its webhook deliveries, when it was started with a `webhook_url`.
    fn webhooks(&self) -> Option<Arc<dyn WebhookReceiver>> {
        None
    }
}

/// Takes webhook deliveries for a worker in process, beside its other work (a process's
/// listening socket): a delivery's `Stripe-Signature` and body, answered with a status.
pub trait WebhookReceiver: Send + Sync {
    fn receive<'a>(&'a self, signature: Option<&'a str>, body: &'a [u8]) -> BoxFuture<'a, u16>;
}

/// What a worker is started with: the same facts as the protocol's `init`.
pub struct WorkerSetup {
    pub worker_id: String,
    /// Starts at 1; a restart after a crash is the next incarnation.
    pub incarnation: u32,
    pub state_dir: PathBuf,
    /// The run's intent log in this process's memory, for the reference executor
    /// ([`executor::Executor::open_in_memory`]): the backend keeps it open for the whole
    /// run, so that it outlives every crash of every worker.
    pub log_name: String,
    pub services: BTreeMap<String, vocabulary::protocol::Service>,
    /// As the protocol's `init.secrets`: `payments_api_key`, `messages_api_key`, `chain_private_key`.
    pub secrets: BTreeMap<String, String>,
    pub limits: vocabulary::protocol::Limits,
    /// Where the worker listens for webhooks, when the scenario has intents an event starts
    /// and the factory [`SimFactory::supports_webhooks`]; the worker registers it with the
    /// payments fake itself.
    pub webhook_url: Option<String>,
    /// Virtual time, shared by every worker of the run.
    pub clock: executor::world::TokioClock,
    pub transport: Arc<dyn Transport>,
}

/// Makes executors for the sim driver.
pub trait SimFactory: Send + Sync {
    /// A name for reports.
    fn name(&self) -> String;
    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String>;
    /// Whether its executors understand workflow steps (`after`, parameter references), as
    /// `init_ok.features` says live. Steps are not proposed to one that does not.
    fn supports_workflows(&self) -> bool {
        false
    }
    /// Whether its executors receive webhooks (`init_ok.features` says `webhooks` live).
    /// Intents an event starts are not proposed to one that does not.
    fn supports_webhooks(&self) -> bool {
        false
    }
}

/// The reference executor, in process.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reference;

struct ReferenceSim(Arc<executor::Executor>);

impl SimFactory for Reference {
    fn name(&self) -> String {
        "reference executor (sim)".into()
    }

    fn supports_workflows(&self) -> bool {
        true
    }

    fn supports_webhooks(&self) -> bool {
        true
    }

    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        let config = vocabulary::protocol::Config {
            worker_id: setup.worker_id.clone(),
            services: setup.services,
            secrets: setup.secrets,
            limits: setup.limits,
        };
        let world = executor::World {
            clock: Arc::new(setup.clock),
            ids: Arc::new(executor::world::Counter::new(&format!(
                "{}.{}",
                setup.worker_id, setup.incarnation
            ))),
            transport: setup.transport,
            hooks: Arc::new(executor::world::NoHooks),
        };
        // In memory: a sim crash is a dropped task, never a power cut, and what it loses is
        // what it would lose on disk (see `IntentLog::open_in_memory`).
        let executor =
            executor::Executor::open_in_memory(config, &setup.log_name, world).map_err(|e| e.to_string())?;
        if let Some(url) = setup.webhook_url {
            executor.listen_at(url);
        }
        Ok(Box::new(ReferenceSim(Arc::new(executor))))
    }
}

fn changes(transitions: Vec<executor::Transition>) -> Vec<StateChange> {
    transitions
        .into_iter()
        .map(|t| StateChange { intent_id: t.intent_id, state: t.to.to_string(), at_ms: Some(t.at_ms) })
        .collect()
}

impl WebhookReceiver for executor::Executor {
    fn receive<'a>(&'a self, signature: Option<&'a str>, body: &'a [u8]) -> BoxFuture<'a, u16> {
        Box::pin(async move { self.receive_webhook(signature, body).await.status })
    }
}

impl SimExecutor for ReferenceSim {
    fn webhooks(&self) -> Option<Arc<dyn WebhookReceiver>> {
        Some(Arc::clone(&self.0) as Arc<dyn WebhookReceiver>)
    }

    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move {
            let proposal = executor::Proposal {
                id: intent.id.clone(),
                action: intent.action.clone(),
                params: intent.params.clone(),
                replaces: intent.replaces.clone(),
                after: intent.after.clone(),
                on_event: intent.on_event.as_ref().map(|t| vocabulary::OnEvent {
                    kind: t.kind.clone(),
                    payment_intent: t.payment_intent.clone(),
                }),
            };
            match self.0.propose(proposal) {
                Ok(_) => Ok(()),
                Err(e @ executor::ProposeError::Action(executor::model::ActionError::Unsupported(_)))
                | Err(e @ executor::ProposeError::NotConfigured { .. })
                | Err(e @ executor::ProposeError::MissingSecret { .. }) => {
                    Err(Refusal::Unsupported(e.to_string()))
                }
                Err(e) => Err(Refusal::Other(e.to_string())),
            }
        })
    }

    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move {
            match self.0.drain(timeout_ms).await {
                Ok(t) => Ok(changes(t)),
                // Intents held by another worker's lease may keep a drain busy; that is not a
                // fault of the executor, and the reconcile phase goes on.
                Err(executor::DrainError::Timeout { transitions, .. }) => Ok(changes(transitions)),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(
            async move { self.0.pass().await.map(|r| changes(r.transitions)).map_err(|e| e.to_string()) },
        )
    }

    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>> {
        Box::pin(async move {
            let intents = self.0.status(None).map_err(|e| e.to_string())?;
            Ok(intents
                .iter()
                .map(|i| Claim {
                    id: i.id.clone(),
                    state: i.state.to_string(),
                    attempts: u64::from(i.attempts),
                    evidence: serde_json::to_value(&i.evidence).unwrap_or_default(),
                })
                .collect())
        })
    }
}
