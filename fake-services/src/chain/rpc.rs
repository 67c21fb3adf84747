//! JSON-RPC 2.0 as geth speaks it over HTTP: the envelope (single calls, batches,
//! notifications), error objects, and positional parameters decoded with geth's messages.
//!
//! geth's wording is kept because clients match on it (web3.py and ethers surface the node's
//! message as is, and some code branches on `nonce too low` or `already known`).

use alloy_primitives::{Address, B256, U256};
use serde_json::{Map, Value, json};

/// The most calls geth accepts in one batch (`--rpc.batch-request-limit`).
pub(crate) const BATCH_CALLS_MAX: usize = 1000;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn parse() -> Self {
        RpcError { code: -32700, message: "parse error".into() }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        RpcError { code: -32600, message: message.into() }
    }

    pub fn method_not_found(method: &str) -> Self {
        RpcError { code: -32601, message: format!("the method {method} does not exist/is not available") }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError { code: -32602, message: message.into() }
    }

    /// What geth answers for any error a method returns: code -32000 and the error's text.
    pub fn server(message: impl Into<String>) -> Self {
        RpcError { code: -32000, message: message.into() }
    }

    pub fn to_json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

/// One element of a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    /// A call to answer (`id` present) or a notification (`id` absent: no answer at all).
    Method { id: Option<Value>, method: String, params: Value },
    /// Not a call: answered `invalid request`, with the message's id when it had a usable one.
    Invalid { id: Option<Value> },
}

impl Call {
    /// The id an answer to this call carries; `None` for a notification.
    pub(crate) fn answer_id(&self) -> Option<Value> {
        match self {
            Call::Method { id, .. } => id.clone(),
            Call::Invalid { id } => Some(id.clone().unwrap_or(Value::Null)),
        }
    }

    pub(crate) fn method(&self) -> Option<&str> {
        match self {
            Call::Method { method, .. } => Some(method),
            Call::Invalid { .. } => None,
        }
    }
}

/// A request body, read the way geth reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Envelope {
    Single(Call),
    Batch(Vec<Call>),
    /// Not JSON, or JSON that is not a message or an array of messages: `parse error`.
    Unparsable,
    /// `[]`: one `empty batch` error, not an array.
    EmptyBatch,
    /// More than [`BATCH_CALLS_MAX`] calls: one `batch too large` error in an array.
    TooLarge {
        first_id: Option<Value>,
    },
}

impl Envelope {
    pub(crate) fn parse(body: &[u8]) -> Envelope {
        let Ok(value) = serde_json::from_slice::<Value>(body) else { return Envelope::Unparsable };
        match value {
            Value::Object(message) => match call(message) {
                Some(call) => Envelope::Single(call),
                None => Envelope::Unparsable,
            },
            Value::Array(items) if items.is_empty() => Envelope::EmptyBatch,
            Value::Array(items) => {
                // geth decodes the whole array into messages first: one element that is not a
                // message object makes the whole body a parse error.
                let mut calls = Vec::with_capacity(items.len().min(BATCH_CALLS_MAX));
                for item in items {
                    let Value::Object(message) = item else { return Envelope::Unparsable };
                    match call(message) {
                        Some(call) => calls.push(call),
                        None => return Envelope::Unparsable,
                    }
                }
                if calls.len() > BATCH_CALLS_MAX {
                    let first_id = calls.iter().find_map(|c| match c {
                        Call::Method { id: Some(id), .. } => Some(id.clone()),
                        _ => None,
                    });
                    return Envelope::TooLarge { first_id };
                }
                Envelope::Batch(calls)
            }
            _ => Envelope::Unparsable,
        }
    }

    /// The calls, in order (none for the error envelopes).
    pub(crate) fn calls(&self) -> &[Call] {
        match self {
            Envelope::Single(call) => std::slice::from_ref(call),
            Envelope::Batch(calls) => calls,
            _ => &[],
        }
    }

    /// The first call's method, which rules match as `rpc_method`.
    pub(crate) fn first_method(&self) -> Option<&str> {
        self.calls().first().and_then(Call::method)
    }
}

/// Reads one message; `None` when a known field has the wrong JSON type (geth's decoder
/// then fails the whole body as a parse error).
fn call(mut message: Map<String, Value>) -> Option<Call> {
    let version = match message.remove("jsonrpc") {
        None | Some(Value::Null) => None,
        Some(Value::String(v)) => Some(v),
        Some(_) => return None,
    };
    let method = match message.remove("method") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(m)) => m,
        Some(_) => return None,
    };
    let id = message.remove("id");
    let params = message.remove("params").unwrap_or(Value::Null);
    let valid_version = version.as_deref() == Some("2.0");
    // An id is usable unless it is an object or an array; `null` is an id like any other.
    let valid_id = id.as_ref().is_some_and(|id| !id.is_object() && !id.is_array());
    Some(if valid_version && !method.is_empty() && (valid_id || id.is_none()) {
        Call::Method { id, method, params }
    } else {
        Call::Invalid { id: id.filter(|_| valid_id) }
    })
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub(crate) fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// `{"jsonrpc":"2.0","id":…,"error":{"code":…,"message":…}}`.
pub(crate) fn error(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// Positional parameters, as geth's `parsePositionalArguments` reads them.
pub(crate) struct Params {
    items: Vec<Value>,
}

impl Params {
    /// `params` may be absent, `null` or an array of at most `max` items.
    pub(crate) fn read(raw: &Value, max: usize) -> Result<Params, RpcError> {
        let items = match raw {
            Value::Null => Vec::new(),
            Value::Array(items) => items.clone(),
            _ => return Err(RpcError::invalid_params("non-array args")),
        };
        if items.len() > max {
            return Err(RpcError::invalid_params(format!("too many arguments, want at most {max}")));
        }
        Ok(Params { items })
    }

    /// Argument `i`, which must be there and not `null`.
    pub(crate) fn required(&self, i: usize) -> Result<&Value, RpcError> {
        match self.items.get(i) {
            None | Some(Value::Null) => {
                Err(RpcError::invalid_params(format!("missing value for required argument {i}")))
            }
            Some(v) => Ok(v),
        }
    }

    /// Argument `i`, absent when missing or `null`.
    pub(crate) fn optional(&self, i: usize) -> Option<&Value> {
        self.items.get(i).filter(|v| !v.is_null())
    }

    /// Decodes argument `i` with `decode`, wrapping its error as geth does.
    pub(crate) fn arg<T>(
        &self,
        i: usize,
        decode: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Result<T, RpcError> {
        decode(self.required(i)?).map_err(|e| invalid_argument(i, e))
    }

    pub(crate) fn optional_arg<T>(
        &self,
        i: usize,
        decode: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Result<Option<T>, RpcError> {
        self.optional(i).map(decode).transpose().map_err(|e| invalid_argument(i, e))
    }
}

pub(crate) fn invalid_argument(i: usize, message: String) -> RpcError {
    RpcError::invalid_params(format!("invalid argument {i}: {message}"))
}

/// A hex string's digits without the prefix, or the error geth's `hexutil` gives, wrapped in
/// the JSON type error it reports for `go_type`.
fn hex_digits<'a>(value: &'a Value, go_type: &str) -> Result<&'a str, String> {
    let Value::String(text) = value else {
        return Err(format!("json: cannot unmarshal non-string into Go value of type {go_type}"));
    };
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(digits) => Ok(digits),
        None => Err(format!(
            "json: cannot unmarshal hex string without 0x prefix into Go value of type {go_type}"
        )),
    }
}

fn decode_hex(digits: &str, go_type: &str) -> Result<Vec<u8>, String> {
    if digits.len() % 2 == 1 {
        return Err(format!(
            "json: cannot unmarshal hex string of odd length into Go value of type {go_type}"
        ));
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    digits
        .as_bytes()
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| format!("json: cannot unmarshal invalid hex string into Go value of type {go_type}"))
}

/// `hexutil.Bytes`: `0x` and an even number of hex digits.
pub(crate) fn bytes(value: &Value) -> Result<Vec<u8>, String> {
    decode_hex(hex_digits(value, "hexutil.Bytes")?, "hexutil.Bytes")
}

fn fixed<const N: usize>(value: &Value, go_type: &str) -> Result<[u8; N], String> {
    let digits = hex_digits(value, go_type)?;
    if digits.len() % 2 == 1 {
        return Err(format!(
            "json: cannot unmarshal hex string of odd length into Go value of type {go_type}"
        ));
    }
    if digits.len() != N * 2 {
        return Err(format!("hex string has length {}, want {} for {go_type}", digits.len(), N * 2));
    }
    let raw = decode_hex(digits, go_type)?;
    let mut out = [0u8; N];
    out.copy_from_slice(&raw);
    Ok(out)
}

/// `common.Address`: 20 bytes, any case.
pub(crate) fn address(value: &Value) -> Result<Address, String> {
    fixed::<20>(value, "common.Address").map(Address::from)
}

/// `common.Hash`: 32 bytes.
pub(crate) fn hash(value: &Value) -> Result<B256, String> {
    fixed::<32>(value, "common.Hash").map(B256::from)
}

/// The digits of a hex quantity, with `hexutil`'s checks: not empty, no leading zero.
fn quantity_digits(text: &str) -> Result<&str, &'static str> {
    let digits =
        text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).ok_or("hex string without 0x prefix")?;
    if digits.is_empty() {
        return Err("hex string \"0x\"");
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err("hex number with leading zero digits");
    }
    if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("invalid hex string");
    }
    Ok(digits)
}

fn quantity_u64(text: &str) -> Result<u64, &'static str> {
    let digits = quantity_digits(text)?;
    if digits.len() > 16 {
        return Err("hex number > 64 bits");
    }
    u64::from_str_radix(digits, 16).map_err(|_| "invalid hex string")
}

/// `hexutil.Uint64`.
pub(crate) fn uint64(value: &Value) -> Result<u64, String> {
    let wrap = |e: &str| format!("json: cannot unmarshal {e} into Go value of type hexutil.Uint64");
    let Value::String(text) = value else {
        return Err("json: cannot unmarshal non-string into Go value of type hexutil.Uint64".into());
    };
    quantity_u64(text).map_err(wrap)
}

/// `hexutil.Big`: at most 256 bits.
pub(crate) fn big(value: &Value) -> Result<U256, String> {
    let wrap = |e: &str| format!("json: cannot unmarshal {e} into Go value of type *hexutil.Big");
    let Value::String(text) = value else {
        return Err("json: cannot unmarshal non-string into Go value of type *hexutil.Big".into());
    };
    let digits = quantity_digits(text).map_err(wrap)?;
    if digits.len() > 64 {
        return Err(wrap("hex number > 256 bits"));
    }
    U256::from_str_radix(digits, 16).map_err(|_| wrap("invalid hex string"))
}

/// `bool`.
pub(crate) fn boolean(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(format!("json: cannot unmarshal {} into Go value of type bool", json_kind(other))),
    }
}

/// `math.HexOrDecimal64`: a hex or decimal string, or a JSON number.
pub(crate) fn hex_or_decimal(value: &Value) -> Result<u64, String> {
    let text = match value {
        Value::Number(n) => return n.as_u64().ok_or_else(|| format!("invalid hex or decimal integer {n}")),
        Value::String(s) => s,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type math.HexOrDecimal64",
                json_kind(other)
            ));
        }
    };
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(digits) => u64::from_str_radix(digits, 16).ok(),
        None => text.parse::<u64>().ok(),
    };
    parsed.ok_or_else(|| format!("invalid hex or decimal integer {text:?}"))
}

/// `[]float64`.
pub(crate) fn floats(value: &Value) -> Result<Vec<f64>, String> {
    let Value::Array(items) = value else {
        return Err(format!("json: cannot unmarshal {} into Go value of type []float64", json_kind(value)));
    };
    items
        .iter()
        .map(|v| {
            v.as_f64().ok_or_else(|| {
                format!("json: cannot unmarshal {} into Go value of type float64", json_kind(v))
            })
        })
        .collect()
}

/// The JSON kind as Go's decoder names it in type errors.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A block as a method's argument names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockId {
    Latest,
    Pending,
    Earliest,
    /// `safe` and `finalized`: the head, on a chain with a single sealer.
    Finalized,
    Number(u64),
    Hash(B256),
}

/// `rpc.BlockNumber`: a tag or a hex number (geth does not wrap these errors).
pub(crate) fn block_number(value: &Value) -> Result<BlockId, String> {
    let text = match value {
        Value::String(s) => s.as_str(),
        // geth trims the quotes off whatever it got, so a bare number reads as unprefixed hex.
        Value::Number(_) => return Err("hex string without 0x prefix".into()),
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type rpc.BlockNumber",
                json_kind(other)
            ));
        }
    };
    match text {
        "latest" => Ok(BlockId::Latest),
        "pending" => Ok(BlockId::Pending),
        "earliest" => Ok(BlockId::Earliest),
        "safe" | "finalized" => Ok(BlockId::Finalized),
        _ => {
            let n = quantity_u64(text).map_err(str::to_string)?;
            if n > i64::MAX as u64 {
                return Err("block number larger than int64".into());
            }
            Ok(BlockId::Number(n))
        }
    }
}

/// `rpc.BlockNumberOrHash`: a tag, a hex number, a 32-byte hash, or
/// `{"blockNumber": …}` / `{"blockHash": …, "requireCanonical": …}`.
pub(crate) fn block_number_or_hash(value: &Value) -> Result<BlockId, String> {
    match value {
        Value::Object(fields) => {
            let number = fields.get("blockNumber").filter(|v| !v.is_null());
            let hash_field = fields.get("blockHash").filter(|v| !v.is_null());
            match (number, hash_field) {
                (Some(_), Some(_)) => {
                    Err("cannot specify both BlockHash and BlockNumber, choose one or the other".into())
                }
                (Some(n), None) => block_number(n),
                (None, Some(h)) => hash(h).map(BlockId::Hash),
                (None, None) => Err("invalid block number or hash".into()),
            }
        }
        Value::String(s) if s.len() == 66 => hash(value).map(BlockId::Hash),
        _ => block_number(value),
    }
}

/// The fields of a call or estimate (`TransactionArgs`) that this node looks at.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CallArgs {
    pub from: Option<Address>,
    pub to: Option<Address>,
    pub value: U256,
    pub input: Vec<u8>,
    pub access_list_items: (u64, u64),
}

pub(crate) fn call_args(value: &Value) -> Result<CallArgs, String> {
    let Value::Object(fields) = value else {
        return Err(format!(
            "json: cannot unmarshal {} into Go value of type ethapi.TransactionArgs",
            json_kind(value)
        ));
    };
    let mut args = CallArgs::default();
    let present = |name: &str| fields.get(name).filter(|v| !v.is_null());
    if let Some(v) = present("from") {
        args.from = Some(address(v)?);
    }
    if let Some(v) = present("to") {
        args.to = Some(address(v)?);
    }
    if let Some(v) = present("value") {
        args.value = big(v)?;
    }
    for name in ["gas", "nonce"] {
        if let Some(v) = present(name) {
            uint64(v)?;
        }
    }
    for name in ["gasPrice", "maxFeePerGas", "maxPriorityFeePerGas", "chainId"] {
        if let Some(v) = present(name) {
            big(v)?;
        }
    }
    let input = present("input").map(bytes).transpose()?;
    let data = present("data").map(bytes).transpose()?;
    if let (Some(i), Some(d)) = (&input, &data)
        && i != d
    {
        return Err(
            "both \"data\" and \"input\" are set and not equal. Please use \"input\" to pass transaction call data"
                .into(),
        );
    }
    args.input = input.or(data).unwrap_or_default();
    if let Some(Value::Array(list)) = present("accessList") {
        let keys =
            list.iter().filter_map(|item| item.get("storageKeys")?.as_array().map(Vec::len)).sum::<usize>();
        args.access_list_items = (list.len() as u64, keys as u64);
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `json_rpc` fuzz target: serde_json's default float parsing is off by an
    /// ulp for some numbers, so an id like this one came back as `2.2222222222222225e104`, an
    /// id the client never sent. The workspace turns on `float_roundtrip`.
    #[test]
    fn a_float_id_is_echoed_as_sent() {
        for id in ["2.222222222222222e104", "0.1", "1.7976931348623157e308", "5e-324", "123456789.12345679"] {
            let body = format!(r#"{{"jsonrpc":"2.0","method":"eth_chainId","id":{id}}}"#);
            let Envelope::Single(call) = Envelope::parse(body.as_bytes()) else { panic!("{body}") };
            let answer = result(&call.answer_id().unwrap(), json!("0x1"));
            let echoed = serde_json::to_string(&answer["id"]).unwrap();
            let sent: f64 = id.parse().unwrap();
            let back: f64 = echoed.parse().unwrap();
            assert_eq!(back.to_bits(), sent.to_bits(), "id {id} echoed as {echoed}");
        }
    }

    #[test]
    fn envelopes_read_as_geth_reads_them() {
        let call = |body: &str| Envelope::parse(body.as_bytes());
        assert_eq!(call("{nope"), Envelope::Unparsable);
        assert_eq!(call("7"), Envelope::Unparsable);
        assert_eq!(call("[1]"), Envelope::Unparsable);
        assert_eq!(call(r#"{"jsonrpc":"2.0","method":5,"id":1}"#), Envelope::Unparsable);
        assert_eq!(call("[]"), Envelope::EmptyBatch);
        assert_eq!(
            call(r#"{"jsonrpc":"2.0","method":"eth_chainId","id":7}"#),
            Envelope::Single(Call::Method {
                id: Some(json!(7)),
                method: "eth_chainId".into(),
                params: Value::Null
            })
        );
        assert_eq!(
            call(r#"{"jsonrpc":"1.0","method":"eth_chainId","id":"a"}"#),
            Envelope::Single(Call::Invalid { id: Some(json!("a")) })
        );
        assert_eq!(call(r#"{"jsonrpc":"2.0","id":{}}"#), Envelope::Single(Call::Invalid { id: None }));
        let notification = call(r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#);
        assert_eq!(notification.calls()[0].answer_id(), None);
    }

    #[test]
    fn arguments_fail_with_geths_words() {
        let cases: Vec<(Result<(), String>, &str)> = vec![
            (
                bytes(&json!("12")).map(drop),
                "hex string without 0x prefix into Go value of type hexutil.Bytes",
            ),
            (bytes(&json!("0x123")).map(drop), "hex string of odd length"),
            (bytes(&json!("0xzz")).map(drop), "invalid hex string"),
            (bytes(&json!(5)).map(drop), "cannot unmarshal non-string"),
            (address(&json!("0x1234")).map(drop), "hex string has length 4, want 40 for common.Address"),
            (uint64(&json!("0x01")).map(drop), "hex number with leading zero digits"),
            (uint64(&json!("0x")).map(drop), "hex string \\\"0x\\\""),
            (block_number(&json!("0x1ffffffffffffffff")).map(drop), "hex number > 64 bits"),
            (block_number(&json!("newest")).map(drop), "hex string without 0x prefix"),
            (boolean(&json!("true")).map(drop), "cannot unmarshal string into Go value of type bool"),
        ];
        for (got, want) in cases {
            let err = got.unwrap_err();
            assert!(format!("{err:?}").contains(want), "{err} does not say {want}");
        }
        assert_eq!(block_number(&json!("0x10")), Ok(BlockId::Number(16)));
        assert_eq!(hex_or_decimal(&json!("10")), Ok(10));
        assert_eq!(hex_or_decimal(&json!("0x10")), Ok(16));
        assert_eq!(big(&json!("0xde0b6b3a7640000")), Ok(U256::from(1_000_000_000_000_000_000u128)));
    }
}
