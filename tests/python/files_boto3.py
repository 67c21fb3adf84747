"""Drives the files fake with the real boto3 SDK (1.44.8), S3 path-style addressing.

usage: files_boto3.py BASE_URL STEP [STEP ...]

Each STEP is one argument, an operation and its `name=value` parameters:

  put key=K body=TEXT [if_none_match=*] [if_match=ETAG|last] [trailer=1]
      client.put_object. `if_match=last` uses the ETag of the last successful put.
      `trailer=1` makes botocore send the body as it does over TLS: aws-chunked, with the
      CRC32 in a trailer (forced here over plain HTTP by an event hook).
  get key=K [checksum=1]
      client.get_object, reading the body to the end; `checksum=1` passes
      ChecksumMode="ENABLED", so botocore validates the body against x-amz-checksum-crc32.
  head key=K [checksum=1]
      client.head_object.
  delete key=K
      client.delete_object.
  delete_many keys=K1,K2,...
      client.delete_objects.

The client: boto3.client("s3", endpoint_url=BASE_URL, region us-east-1, dummy credentials,
Config(s3={"addressing_style": "path"}, retries={"mode": "standard"})): standard mode,
3 attempts in all.

Prints one JSON line: {"steps": [...]}, one entry per STEP with "ok", "status", "headers"
(relevant response headers, lowercased), "attempts" (per HTTP attempt the SDK made: its
amz-sdk-invocation-id, amz-sdk-request and the request headers that matter here), and
either the operation's result fields or "error" (botocore's Error dict: Code, Message,
Condition, ...).
"""

import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from botocore.httpchecksum import StreamingChecksumBody

from observe import emit, usage

BUCKET = "reports"
# Request headers worth reporting per attempt; names lowercased.
REQUEST_HEADERS = (
    "amz-sdk-invocation-id",
    "amz-sdk-request",
    "content-encoding",
    "expect",
    "if-match",
    "if-none-match",
    "x-amz-checksum-crc32",
    "x-amz-checksum-mode",
    "x-amz-trailer",
)
RESPONSE_HEADERS = (
    "content-length",
    "etag",
    "x-amz-checksum-crc32",
    "x-amz-id-2",
    "x-amz-request-id",
)


def params_of(words):
    params = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            usage(f"expected name=value, got {word!r}\n\n{__doc__}")
        params[name] = value
    return params


def text(value):
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def lowered(headers, names):
    headers = {text(k).lower(): text(v) for k, v in dict(headers or {}).items()}
    return {k: headers[k] for k in names if k in headers}


def main(argv):
    if len(argv) < 3:
        usage(__doc__)
    client = boto3.client(
        "s3",
        endpoint_url=argv[1].rstrip("/"),
        aws_access_key_id="AKIDTWICE",
        aws_secret_access_key="twice-secret",
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard"}),
    )
    attempts = []
    force_trailer = {"on": False}

    def record_attempt(request, **_):
        attempts.append(lowered(request.headers, REQUEST_HEADERS))

    def trailer(params, **_):
        # botocore sends checksums in an aws-chunked trailer only over https; a test of that
        # framing against a loopback fake asks for it here.
        algorithm = params.get("context", {}).get("checksum", {}).get("request_algorithm")
        if force_trailer["on"] and algorithm:
            algorithm["in"] = "trailer"

    client.meta.events.register("before-send.s3", record_attempt)
    client.meta.events.register("before-call.s3.PutObject", trailer)

    steps = []
    last_etag = None
    for step in argv[2:]:
        words = step.split()
        if not words:
            usage(f"empty step\n\n{__doc__}")
        op, params = words[0], params_of(words[1:])
        attempts.clear()
        entry = {"op": op}
        try:
            if op == "put":
                call = {"Bucket": BUCKET, "Key": params.pop("key"), "Body": params.pop("body").encode()}
                if "if_none_match" in params:
                    call["IfNoneMatch"] = params.pop("if_none_match")
                if "if_match" in params:
                    wanted = params.pop("if_match")
                    call["IfMatch"] = last_etag if wanted == "last" else wanted
                force_trailer["on"] = params.pop("trailer", "0") == "1"
                result = client.put_object(**call)
                force_trailer["on"] = False
                last_etag = result["ETag"]
                entry.update(etag=result["ETag"], checksum_crc32=result.get("ChecksumCRC32"))
            elif op == "get":
                call = {"Bucket": BUCKET, "Key": params.pop("key")}
                if params.pop("checksum", "0") == "1":
                    call["ChecksumMode"] = "ENABLED"
                result = client.get_object(**call)
                body = result["Body"]
                # StreamingChecksumBody checks the CRC32 when the body has been read to the end.
                entry["validated"] = isinstance(body, StreamingChecksumBody)
                entry["body"] = body.read().decode("utf-8", "replace")
                entry.update(etag=result["ETag"], checksum_crc32=result.get("ChecksumCRC32"))
                entry["content_length"] = result["ContentLength"]
            elif op == "head":
                call = {"Bucket": BUCKET, "Key": params.pop("key")}
                if params.pop("checksum", "0") == "1":
                    call["ChecksumMode"] = "ENABLED"
                result = client.head_object(**call)
                entry.update(
                    etag=result["ETag"],
                    checksum_crc32=result.get("ChecksumCRC32"),
                    content_length=result["ContentLength"],
                )
            elif op == "delete":
                result = client.delete_object(Bucket=BUCKET, Key=params.pop("key"))
            elif op == "delete_many":
                keys = params.pop("keys").split(",")
                result = client.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys]})
                entry["deleted"] = sorted(d["Key"] for d in result.get("Deleted", []))
                entry["errors"] = result.get("Errors", [])
            else:
                usage(f"unknown operation {op!r}\n\n{__doc__}")
            meta = result["ResponseMetadata"]
            entry.update(ok=True, status=meta["HTTPStatusCode"], retries=meta.get("RetryAttempts"))
            entry["headers"] = lowered(meta.get("HTTPHeaders"), RESPONSE_HEADERS)
        except ClientError as e:
            force_trailer["on"] = False
            meta = e.response.get("ResponseMetadata", {})
            entry.update(ok=False, status=meta.get("HTTPStatusCode"), retries=meta.get("RetryAttempts"))
            entry["headers"] = lowered(meta.get("HTTPHeaders"), RESPONSE_HEADERS)
            entry["error"] = dict(e.response.get("Error", {}))
            entry["request_id"] = meta.get("RequestId")
        entry["attempts"] = list(attempts)
        steps.append(entry)
        if params:
            usage(f"unknown parameters for {op}: {sorted(params)}")
    emit({"steps": steps})


if __name__ == "__main__":
    main(sys.argv)
