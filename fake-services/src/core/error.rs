//! The errors a service answers, as the pipeline and the services raise them ([`ApiError`]),
//! and what each service renders them in ([`Shape`]): one error, five wire formats; and the
//! `Retry-After` every 429 carries, whatever its format ([`RETRY_AFTER_S`]).

use crate::wire::FakeResponse;

/// An error as a service reports it; each service renders it in its own wire shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    /// The error family (Stripe's `type`).
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub message: String,
    pub param: Option<String>,
    /// The pipeline's own words for a bare status (a fault's `reject` or 500), which a
    /// service whose errors read otherwise (S3's codes, geth's messages) replaces with its own
    /// words for that status.
    pub standard: bool,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, code: None, message: message.into(), param: None, standard: false }
    }

    /// What a `reject` fault answers without a body: for a refusal that needs a decision
    /// (400, 401, 403, 422) the words a JSON API in Stripe's style uses for it, otherwise a
    /// generic rejection. Marked [`ApiError::standard`], so that S3 and geth say it their way.
    pub fn rejected(status: u16) -> Self {
        let (kind, message) = match status {
            400 => ("invalid_request_error", "The request was rejected: it is not valid for this endpoint."),
            401 => ("invalid_request_error", "Invalid API Key provided."),
            403 => (
                "invalid_request_error",
                "The provided key does not have the required permissions for this endpoint. Having the write permission on this resource would allow this request to continue.",
            ),
            422 => (
                "invalid_request_error",
                "The request was understood, but its parameters cannot be processed.",
            ),
            _ => ("api_error", "The request was rejected."),
        };
        ApiError { standard: true, ..ApiError::new(status, kind, message) }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// A 400 for a request the service cannot read.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request_error", message)
    }

    /// The generic error a service answers when it fails inside.
    pub fn internal(status: u16) -> Self {
        let error =
            ApiError::new(status, "api_error", "An unknown error occurred while processing the request.");
        ApiError { standard: true, ..error }
    }
}

/// How long a 429 tells its caller to wait, in whole seconds (`Retry-After`). No fault says how
/// long its refusal lasts (a `reject` holds for as long as its rule is armed and fires, which
/// the fake cannot know ahead), so every service says what Resend says: one second.
pub const RETRY_AFTER_S: u64 = 1;

/// Puts `Retry-After` on a 429 that has none: a client told "too many requests" is told when
/// to come back, whichever service, fault or body made the 429. Other statuses are left as
/// they are: S3 sends its 503 `SlowDown` without one, and Stripe its 503s.
pub(super) fn retry_after(response: &mut FakeResponse) {
    if response.status == 429 && response.header("retry-after").is_none() {
        response.headers.push(("Retry-After".into(), RETRY_AFTER_S.to_string()));
    }
}

/// What differs between services at the shared points.
pub struct Shape {
    /// The service's error body.
    pub error: fn(&ApiError) -> FakeResponse,
    /// Headers every answer carries, such as a request id.
    pub stamp: fn(&mut FakeResponse, &str),
}
