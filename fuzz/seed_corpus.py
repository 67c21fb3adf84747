"""Writes the seed inputs of the cargo fuzz targets into fuzz/corpus/<target>/, each named by
the SHA-1 of its bytes as cargo fuzz names them: forms as stripe-python encodes them, S3 bodies
as botocore serialises them, transactions as eth_account signs them, web3-shaped JSON-RPC
bodies, the catalog's scenarios, and the malformed cases of the unit tests.

Run from the repository root with the suite's venv (`cargo xtask test` builds it):
    target/twice-venv/bin/python fuzz/seed_corpus.py . fuzz/corpus
then grow and minimise them with `cargo xtask fuzz-parsers --cmin`.
"""
import hashlib, json, os, sys, glob
root = sys.argv[1]
out = sys.argv[2]
def put(target, data):
    if isinstance(data, str): data = data.encode()
    d = os.path.join(out, target); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, hashlib.sha1(data).hexdigest()), 'wb').write(data)

# forms: what stripe-python sends
from urllib.parse import urlencode
from stripe._encode import _api_encode
forms = [
 {"amount": 1999, "currency": "usd", "metadata": {"order": "4812"}, "expand": ["latest_charge"]},
 {"amount": 500, "currency": "eur", "payment_method_types": ["card"], "automatic_payment_methods": {"enabled": True}, "description": "café ☕ & co"},
 {"payment_intent": "pi_123", "amount": 100, "reason": "requested_by_customer", "metadata": {"a": "1", "b": "2"}},
 {"confirm": True, "payment_method": "pm_card_visa", "return_url": "https://example.com/?a=b&c=d"},
 {"name": "Acme", "owner": {"email": "a@example.com", "roles": ["admin", "billing"]}},
 {"from": "a@example.com", "to": ["b@example.com", "c@example.com"], "subject": "hi", "html": "<p>x</p>"},
]
for f in forms:
    put("forms", urlencode(list(_api_encode(f, None) if _api_encode.__code__.co_argcount > 1 else _api_encode(f))))
for raw in ["", "a=1&a=2", "a[=1", "[a]=1", "a]b[=1", "a[b]=1&a=2", "a[0]=x&a[2]=y", "a[][b]=1", "a[b][c][d]=%E2%9C%93+x", "=", "&&&", "a[x]=1&a[]=2", "a%5Bb%5D=1"]:
    put("forms", raw)

# S3 XML: what botocore sends
import botocore.session
from botocore import serialize
m = botocore.session.get_session().get_service_model('s3')
ser = serialize.create_serializer('rest-xml')
reqs = [
 ('DeleteObjects', {'Bucket': 'b', 'Delete': {'Objects': [{'Key': 'a.txt'}, {'Key': 'dir/b &<>.bin', 'VersionId': 'v1'}], 'Quiet': True}}),
 ('DeleteObjects', {'Bucket': 'b', 'Delete': {'Objects': [{'Key': 'k', 'ETag': '"abc"', 'Size': 3, 'LastModifiedTime': '2024-01-01T00:00:00Z'}], 'Quiet': False}}),
 ('CompleteMultipartUpload', {'Bucket': 'b', 'Key': 'k', 'UploadId': 'u', 'MultipartUpload': {'Parts': [{'ETag': '"e1"', 'PartNumber': 1, 'ChecksumCRC32': 'AAAAAA=='}, {'ETag': '"e2"', 'PartNumber': 2}]}}),
 ('CompleteMultipartUpload', {'Bucket': 'b', 'Key': 'k', 'UploadId': 'u', 'MultipartUpload': {'Parts': [{'ETag': '"e1"', 'PartNumber': 1, 'ChecksumSHA256': 'x', 'ChecksumCRC64NVME': 'y'}]}}),
]
for op, params in reqs:
    body = ser.serialize_to_request(params, m.operation_model(op))['body']
    put("s3_xml", body)
for raw in ["<?xml version=\"1.0\"?><!DOCTYPE x><Delete/>", "<Delete><Object><Key>&amp;&#x41;<![CDATA[c]]></Key></Object><Quiet>true</Quiet></Delete>",
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Part><PartNumber>99999999999</PartNumber><ETag>e</ETag></Part></CompleteMultipartUpload>",
            "bytes=0-4", "bytes=-3", "bytes=5-", "bytes=0-1,3-4", "bytes=18446744073709551615-", "bytes=-0",
            "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Fri, 31 Dec 9999 23:59:59 GMT"]:
    put("s3_xml", raw)

# transactions: what eth_account signs
from eth_account import Account
acct = Account.from_key("0x" + "11" * 32)
to = "0x" + "22" * 20
txs = [
 {"nonce": 0, "gasPrice": 1_000_000_000, "gas": 21000, "to": to, "value": 1, "data": b"", "chainId": 31337},
 {"nonce": 7, "gasPrice": 0, "gas": 100000, "to": None, "value": 0, "data": bytes.fromhex("6080604052"), "chainId": 1} ,
 {"type": 1, "nonce": 1, "gasPrice": 2, "gas": 30000, "to": to, "value": 10**18, "data": b"\x01\x02", "chainId": 31337,
  "accessList": [{"address": to, "storageKeys": ["0x" + "00" * 31 + "01"]}]},
 {"type": 2, "nonce": 2, "maxFeePerGas": 2_000_000_000, "maxPriorityFeePerGas": 1_000_000_000, "gas": 21000, "to": to, "value": 12345, "data": b"", "chainId": 31337, "accessList": []},
 {"type": 2, "nonce": 2**64 - 2, "maxFeePerGas": 2**128 - 1, "maxPriorityFeePerGas": 0, "gas": 2**63, "to": to, "value": 2**256 - 1, "data": b"\xff" * 60, "chainId": 2**63},
]
for tx in txs:
    if tx.get("to") is None: tx.pop("to")
    put("tx_decode", bytes(acct.sign_transaction(tx).raw_transaction))
try:
    auth = acct.sign_authorization({"chainId": 31337, "address": to, "nonce": 3})
    tx = {"type": 4, "nonce": 2, "maxFeePerGas": 2, "maxPriorityFeePerGas": 1, "gas": 50000, "to": to, "value": 0, "data": b"", "chainId": 31337, "accessList": [], "authorizationList": [auth]}
    put("tx_decode", bytes(acct.sign_transaction(tx).raw_transaction))
except Exception as e:
    print("no type 4:", e)
for h in ["", "02", "7f00", "80", "c0", "02c0", "01c3010203", "f86c", "02c3c0c0c0", "03c0", "04c0"]:
    put("tx_decode", bytes.fromhex(h))

# JSON-RPC: what web3.py sends
raw = "0x" + bytes(acct.sign_transaction(txs[3]).raw_transaction).hex()
calls = [
 {"jsonrpc": "2.0", "method": "eth_chainId", "params": [], "id": 0},
 {"jsonrpc": "2.0", "method": "eth_getTransactionCount", "params": [acct.address, "pending"], "id": 1},
 {"jsonrpc": "2.0", "method": "eth_sendRawTransaction", "params": [raw], "id": 2},
 {"jsonrpc": "2.0", "method": "eth_getTransactionReceipt", "params": ["0x" + "ab" * 32], "id": "x"},
 {"jsonrpc": "2.0", "method": "eth_getBalance", "params": [to, "latest"], "id": None},
 {"jsonrpc": "2.0", "method": "eth_estimateGas", "params": [{"from": acct.address, "to": to, "value": "0x1"}], "id": 3},
 {"jsonrpc": "2.0", "method": "eth_blockNumber"},
]
for c in calls: put("json_rpc", json.dumps(c))
put("json_rpc", json.dumps(calls[:3]))
for r in ["[]", "[1]", "{\"jsonrpc\":\"1.0\",\"method\":\"x\",\"id\":{}}", "{\"method\":5}", "nul", "[{\"id\":1e400}]", "{\"jsonrpc\":\"2.0\",\"id\":-0,\"method\":\"eth_call\",\"params\":{}}"]:
    put("json_rpc", r)

# scenarios: the catalog
for p in sorted(glob.glob(os.path.join(root, "scenarios/catalog/*.toml"))):
    put("scenario_toml", open(p, 'rb').read())
for r in ["", "name = 1", "[[faults]]\nnht = 1\n", "x = nan\n"]:
    put("scenario_toml", r)
