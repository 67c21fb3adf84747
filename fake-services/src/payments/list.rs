//! `GET /v1/refunds`: the query (filtered by `payment_intent` or `charge`, `limit`, a cursor
//! either way) and its page, newest first, as Stripe lists.

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::refunds::{Refund, RefundList};
use crate::core::{ApiError, Inner};
use crate::wire::{FakeRequest, FakeResponse};

const LIST_PARAMS: &[&str] =
    &["charge", "ending_before", "expand", "limit", "payment_intent", "starting_after"];

#[derive(Debug, Default)]
pub(super) struct ListQuery {
    payment_intent: Option<String>,
    charge: Option<String>,
    limit: usize,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

pub(super) fn parse_list(req: &FakeRequest) -> Result<ListQuery, ApiError> {
    let mut query = ListQuery { limit: 10, ..ListQuery::default() };
    for (name, value) in req.query_pairs() {
        match name.as_str() {
            "payment_intent" => query.payment_intent = Some(value),
            "charge" => query.charge = Some(value),
            "starting_after" => query.starting_after = Some(value),
            "ending_before" => query.ending_before = Some(value),
            "limit" => {
                query.limit = match value.parse::<usize>() {
                    Ok(n) if (1..=100).contains(&n) => n,
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "Invalid limit: must be an integer between 1 and 100, got {value}"
                        ))
                        .param("limit"));
                    }
                }
            }
            n if n.starts_with("expand") => {}
            _ if LIST_PARAMS.contains(&name.as_str()) => {}
            _ => return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name)),
        }
    }
    if query.starting_after.is_some() && query.ending_before.is_some() {
        return Err(ApiError::invalid(
            "You may only specify one of these parameters: ending_before, starting_after.",
        ));
    }
    Ok(query)
}

pub(super) fn list(
    inner: &mut Inner<PaymentsState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    // Newest first, as Stripe lists.
    let matching: Vec<&Refund> = inner
        .state
        .refunds
        .iter()
        .rev()
        .filter(|r| r.created_ms <= visible_until_ms)
        .filter(|r| query.payment_intent.as_ref().is_none_or(|p| *r.payment_intent == **p))
        .filter(|r| query.charge.as_ref().is_none_or(|c| *r.charge == **c))
        .collect();
    // The page is the `limit` items next to the cursor; `has_more` says whether the list goes
    // on beyond the page in the direction of travel.
    let (page, has_more): (Vec<&Refund>, bool) = if let Some(after) = &query.starting_after {
        match matching.iter().position(|r| &r.id == after) {
            Some(i) => {
                let rest = &matching[i + 1..];
                (rest.iter().take(query.limit).copied().collect(), rest.len() > query.limit)
            }
            None => return stripe_error(&missing("refund", after).param("starting_after")),
        }
    } else if let Some(before) = &query.ending_before {
        match matching.iter().position(|r| &r.id == before) {
            Some(i) => (matching[i.saturating_sub(query.limit)..i].to_vec(), i > query.limit),
            None => return stripe_error(&missing("refund", before).param("ending_before")),
        }
    } else {
        (matching.iter().take(query.limit).copied().collect(), matching.len() > query.limit)
    };
    let data = page.iter().map(|r| r.object()).collect();
    FakeResponse::json_of(200, &RefundList { data, has_more, object: "list", url: "/v1/refunds" })
}
