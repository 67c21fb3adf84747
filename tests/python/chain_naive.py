"""A transfer the naive way: on any error, sign again with the next nonce and send that.

usage: chain_naive.py BASE_URL PRIVATE_KEY TO VALUE_WEI [TIMEOUT_S]

The classic bug: the script reads "the send failed" as "nothing happened, and that nonce is
spent", so it signs a new transaction (nonce + 1, a new hash) for the same transfer. Up to 3
attempts; web3.py's own retries happen inside each attempt. Prints one JSON line: "from",
"attempts", "errors" (one "Class: message" per failed attempt), "hashes" (every hash it
signed, in order), "ok", and the receipt of the last hash it sent ("receipt": status,
blockNumber, transactionHash, or "error").
"""

import sys

from eth_account import Account
from web3 import Web3

from observe import emit, usage


def main(argv):
    if not 5 <= len(argv) <= 6:
        usage(__doc__)
    base_url, key, to, value = argv[1], argv[2], Web3.to_checksum_address(argv[3]), int(argv[4])
    timeout = float(argv[5]) if len(argv) > 5 else 10.0
    w3 = Web3(Web3.HTTPProvider(base_url, request_kwargs={"timeout": timeout}))
    account = Account.from_key(key)
    chain_id = w3.eth.chain_id
    nonce = w3.eth.get_transaction_count(account.address)
    tip = w3.eth.max_priority_fee
    max_fee = tip + 2 * w3.eth.get_block("latest")["baseFeePerGas"]
    errors, hashes, sent = [], [], None
    for _ in range(3):
        signed = account.sign_transaction(
            {
                "type": 2,
                "chainId": chain_id,
                "nonce": nonce,
                "to": to,
                "value": value,
                "gas": 21000,
                "maxPriorityFeePerGas": tip,
                "maxFeePerGas": max_fee,
            }
        )
        hashes.append("0x" + bytes(signed.hash).hex())
        try:
            sent = w3.eth.send_raw_transaction(signed.raw_transaction)
            break
        except Exception as e:  # the bug under test: every error means "try a fresh nonce"
            errors.append(f"{type(e).__name__}: {e}")
            nonce += 1
    out = {"from": account.address.lower(), "attempts": len(hashes), "errors": errors, "hashes": hashes, "ok": sent is not None}
    if sent is not None:
        try:
            r = w3.eth.wait_for_transaction_receipt(sent, timeout=30, poll_latency=0.1)
            out["receipt"] = {
                "status": r["status"],
                "blockNumber": r["blockNumber"],
                "transactionHash": "0x" + bytes(r["transactionHash"]).hex(),
            }
        except Exception as e:  # what the client saw
            out["receipt"] = {"error": f"{type(e).__name__}: {e}"}
    emit(out)


if __name__ == "__main__":
    main(sys.argv)
