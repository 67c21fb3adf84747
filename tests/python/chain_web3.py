"""A transfer the way web3.py 8 is meant to be used: sign once with eth-account, send the raw
bytes, wait for the receipt.

usage: chain_web3.py BASE_URL PRIVATE_KEY TO VALUE_WEI [TIMEOUT_S] [--tour]

The HTTPProvider gets `request_kwargs={"timeout": TIMEOUT_S}` (default 10) and keeps web3's
own retry configuration: it re-sends an `eth_sendRawTransaction` that timed out, with the same
bytes. If the send raises, the script still waits for the receipt of the hash it signed: the
transaction may be in the pool whatever the error said.

Prints one JSON line: "chain_id", "from", "nonce" (the pending count it signed with), "hash"
(eth-account's), "send" ({"ok", "hash"} or {"ok": false, "class", "message"}), "receipt"
(status, blockNumber, transactionHash, from, to, gasUsed, effectiveGasPrice, or "error"),
"balance_before", "balance_after", "to_balance_after" (decimal strings of wei), "nonce_after". With --tour, "tour":
what web3 made of the other read methods (blocks, fee history, estimate, call, a batch).
"""

import sys

from eth_account import Account
from web3 import Web3

from observe import emit, usage


def error_of(e):
    return {"ok": False, "class": type(e).__name__, "message": str(e)}


def receipt_of(w3, tx_hash):
    try:
        r = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.1)
    except Exception as e:  # the script reports what the client saw, whatever it was
        return {"error": f"{type(e).__name__}: {e}"}
    return {
        "status": r["status"],
        "blockNumber": r["blockNumber"],
        "transactionHash": "0x" + bytes(r["transactionHash"]).hex(),
        "from": r["from"].lower(),
        "to": r["to"].lower(),
        "gasUsed": r["gasUsed"],
        "effectiveGasPrice": r["effectiveGasPrice"],
    }


def tour(w3, sender, to):
    """Every read method through web3's own formatters and validators."""
    latest = w3.eth.get_block("latest")
    full = w3.eth.get_block(latest["number"], full_transactions=True)
    pending = w3.eth.get_block("pending")
    history = w3.eth.fee_history(2, "latest", [25.0, 75.0])
    with w3.batch_requests() as batch:
        batch.add(w3.eth.get_block_number())
        batch.add(w3.eth.get_balance(sender))
        batch.add(w3.eth.get_transaction_count(sender, "pending"))
        answers = batch.execute()
    return {
        "client_version": w3.client_version,
        "net_version": w3.net.version,
        "block_number": w3.eth.block_number,
        "latest": {"number": latest["number"], "baseFeePerGas": latest["baseFeePerGas"], "gasLimit": latest["gasLimit"], "transactions": len(latest["transactions"])},
        "full_transactions": [
            {"hash": "0x" + bytes(t["hash"]).hex(), "from": t["from"].lower(), "value": t["value"], "type": t["type"]}
            for t in full["transactions"]
        ],
        "pending_number": pending["number"],
        "fee_history": {"oldestBlock": history["oldestBlock"], "baseFeePerGas": history["baseFeePerGas"], "reward": history["reward"]},
        "estimate": w3.eth.estimate_gas({"from": sender, "to": to, "value": 1}),
        "call": "0x" + bytes(w3.eth.call({"to": to, "data": "0x70a08231"})).hex(),
        "gas_price": w3.eth.gas_price,
        "max_priority_fee": w3.eth.max_priority_fee,
        "batch": [int(a) for a in answers],
    }


def main(argv):
    flags = [a for a in argv[1:] if a.startswith("--")]
    args = [a for a in argv[1:] if not a.startswith("--")]
    if not 4 <= len(args) <= 5 or set(flags) - {"--tour"}:
        usage(__doc__)
    base_url, key, to, value = args[0], args[1], Web3.to_checksum_address(args[2]), int(args[3])
    timeout = float(args[4]) if len(args) > 4 else 10.0
    w3 = Web3(Web3.HTTPProvider(base_url, request_kwargs={"timeout": timeout}))
    account = Account.from_key(key)
    sender = account.address
    chain_id = w3.eth.chain_id
    nonce = w3.eth.get_transaction_count(sender, "pending")
    balance_before = w3.eth.get_balance(sender)
    # web3's own fee rule for a 1559 transaction: the suggested tip plus twice the base fee.
    tip = w3.eth.max_priority_fee
    base_fee = w3.eth.get_block("latest")["baseFeePerGas"]
    tx = {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "to": to,
        "value": value,
        "gas": w3.eth.estimate_gas({"from": sender, "to": to, "value": value}),
        "maxPriorityFeePerGas": tip,
        "maxFeePerGas": tip + 2 * base_fee,
    }
    signed = account.sign_transaction(tx)
    tx_hash = "0x" + bytes(signed.hash).hex()
    try:
        sent = w3.eth.send_raw_transaction(signed.raw_transaction)
        send = {"ok": True, "hash": "0x" + bytes(sent).hex()}
    except Exception as e:  # the client's answer, not a script bug
        send = error_of(e)
    out = {
        "chain_id": chain_id,
        "from": sender.lower(),
        "nonce": nonce,
        "hash": tx_hash,
        "send": send,
        "receipt": receipt_of(w3, signed.hash),
        "balance_before": str(balance_before),
        "balance_after": str(w3.eth.get_balance(sender)),
        "to_balance_after": str(w3.eth.get_balance(to)),
        "nonce_after": w3.eth.get_transaction_count(sender),
    }
    if "--tour" in flags:
        out["tour"] = tour(w3, sender, to)
    emit(out)


if __name__ == "__main__":
    main(sys.argv)
