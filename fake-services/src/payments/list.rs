//! Stripe's lists: `GET /v1/refunds` (filtered by `payment_intent` or `charge`) and
//! `GET /v1/payment_intents` (by `customer`), newest first, `limit` items a page from a cursor
//! either way. One query parser and one pager serve both, so the two lists page alike and
//! refuse bad parameters in the same words.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::intents::Intent;
use super::refunds::{Refund, RefundList};
use crate::core::{ApiError, Inner};
use crate::wire::{FakeRequest, FakeResponse};

/// The filters of `GET /v1/refunds`.
pub(super) const REFUND_FILTERS: &[&str] = &["charge", "payment_intent"];
/// The filters of `GET /v1/payment_intents`.
pub(super) const INTENT_FILTERS: &[&str] = &["customer"];

/// Stripe's page size when none is asked for, and the largest it serves.
const LIMIT_DEFAULT: usize = 10;
const LIMIT_MAX: usize = 100;

/// A list request, checked: its filters, and where its page is.
#[derive(Debug, Default)]
pub(super) struct ListQuery {
    /// The filters given, by name; only names the list takes.
    filters: BTreeMap<&'static str, String>,
    /// The array filters given (`types[0]=...`, `types[]=...`), by the list's name for them
    /// (`types[]`).
    arrays: BTreeMap<&'static str, Vec<String>>,
    limit: usize,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

impl ListQuery {
    pub(super) fn filter(&self, name: &str) -> Option<&str> {
        self.filters.get(name).map(String::as_str)
    }

    /// The values of the array filter `name` (`types[]`), if any was given.
    pub(super) fn all(&self, name: &str) -> Option<&[String]> {
        self.arrays.get(name).map(Vec::as_slice)
    }
}

/// Reads a list's query: `limit`, one cursor, `expand[]`, and the list's own `filters`;
/// anything else is Stripe's 400 on its `param`.
pub(super) fn parse_list(req: &FakeRequest, filters: &'static [&'static str]) -> Result<ListQuery, ApiError> {
    let mut query = ListQuery { limit: LIMIT_DEFAULT, ..ListQuery::default() };
    for (name, value) in req.query_pairs() {
        // `expand[0]` is `expand`'s, `created[gte]` is `created`'s.
        let base = name.split('[').next().unwrap_or_default();
        match name.as_str() {
            "starting_after" => query.starting_after = Some(value),
            "ending_before" => query.ending_before = Some(value),
            "limit" => query.limit = limit(&value)?,
            _ if base == "expand" => {}
            // An array filter, `types[0]=a&types[1]=b` (what the SDKs send) or `types[]=a`.
            _ if name != base && filters.iter().any(|f| f.strip_suffix("[]") == Some(base)) => {
                if let Some(array) = filters.iter().find(|f| f.strip_suffix("[]") == Some(base)) {
                    query.arrays.entry(array).or_default().push(value);
                }
            }
            // Stripe takes `created` on both lists; saying it is unknown would be untrue, and
            // ignoring it would answer objects the caller ruled out.
            _ if base == "created" => {
                return Err(ApiError::invalid(format!(
                    "Invalid {name}: the payments fake does not filter lists by created"
                ))
                .param(name));
            }
            _ => match filters.iter().find(|f| **f == name) {
                Some(filter) => {
                    query.filters.insert(filter, value);
                }
                None => {
                    return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name));
                }
            },
        }
    }
    if query.starting_after.is_some() && query.ending_before.is_some() {
        return Err(ApiError::invalid(
            "You may only specify one of these parameters: ending_before, starting_after.",
        ));
    }
    Ok(query)
}

fn limit(value: &str) -> Result<usize, ApiError> {
    match value.parse::<usize>() {
        Ok(n) if (1..=LIMIT_MAX).contains(&n) => Ok(n),
        _ => Err(ApiError::invalid(format!(
            "Invalid limit: must be an integer between 1 and {LIMIT_MAX}, got {value}"
        ))
        .param("limit")),
    }
}

/// The page of `items` (the whole list, newest first) that `query` asks for: the `limit`
/// items next to the cursor, and whether the list goes on beyond them in the direction of
/// travel. A cursor that is not in the list is Stripe's 404 for a missing `what`.
pub(super) fn page<'a, T>(
    items: &'a [T],
    id: impl Fn(&T) -> &str,
    query: &ListQuery,
    what: &str,
) -> Result<(&'a [T], bool), ApiError> {
    let position = |cursor: &str, param: &str| {
        items.iter().position(|item| id(item) == cursor).ok_or_else(|| missing(what, cursor).param(param))
    };
    let limit = query.limit;
    if let Some(after) = &query.starting_after {
        let rest = &items[position(after, "starting_after")? + 1..];
        Ok((&rest[..rest.len().min(limit)], rest.len() > limit))
    } else if let Some(before) = &query.ending_before {
        let i = position(before, "ending_before")?;
        Ok((&items[i.saturating_sub(limit)..i], i > limit))
    } else {
        Ok((&items[..items.len().min(limit)], items.len() > limit))
    }
}

/// `GET /v1/refunds`: the refunds the read may see, newest first (refunds are kept in
/// creation order).
pub(super) fn list_refunds(
    inner: &mut Inner<PaymentsState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    let (payment_intent, charge) = (query.filter("payment_intent"), query.filter("charge"));
    let matching: Vec<&Refund> = inner
        .state
        .refunds
        .iter()
        .rev()
        .filter(|r| r.created_ms <= visible_until_ms)
        .filter(|r| payment_intent.is_none_or(|p| *r.payment_intent == *p))
        .filter(|r| charge.is_none_or(|c| *r.charge == *c))
        .collect();
    match page(&matching, |r| r.id.as_str(), query, "refund") {
        Ok((page, has_more)) => {
            let data = page.iter().map(|r| r.object()).collect();
            FakeResponse::json_of(200, &RefundList { data, has_more, object: "list", url: "/v1/refunds" })
        }
        Err(e) => stripe_error(&e),
    }
}

/// `GET /v1/payment_intents`: each intent as the read may see it, newest first by `created`;
/// intents created in the same millisecond (a batch seeded at once) the last made first, so
/// that the order, and so every page, is the same on every read.
pub(super) fn list_intents(
    inner: &mut Inner<PaymentsState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    // The fake has no customers: no intent belongs to one, so a customer's list is empty.
    let no_customer_named = query.filter("customer").is_none();
    let mut visible: Vec<(usize, &Intent)> = inner
        .state
        .intents
        .values()
        .filter(|_| no_customer_named)
        .filter_map(|history| history.as_of(visible_until_ms).map(|intent| (history.number(), intent)))
        .collect();
    visible.sort_unstable_by_key(|(number, intent)| Reverse((intent.created_ms, *number)));
    match page(&visible, |(_, intent)| intent.id.as_str(), query, "payment_intent") {
        Ok((page, has_more)) => {
            let data: Vec<Value> = page.iter().map(|(_, intent)| intent.to_json()).collect();
            let list =
                json!({"object": "list", "url": "/v1/payment_intents", "has_more": has_more, "data": data});
            FakeResponse::json(200, &list)
        }
        Err(e) => stripe_error(&e),
    }
}
