"""Drives the files fake with the real boto3 SDK (1.44.8), S3 path-style addressing.

usage: files_boto3.py BASE_URL STEP [STEP ...]

Each STEP is one argument, an operation and its `name=value` parameters:

  put key=K body=TEXT [if_none_match=*] [if_match=ETAG|last] [trailer=1] [metadata=K:V,...]
      client.put_object. `if_match=last` uses the ETag of the last successful put.
      `metadata` is boto3's `Metadata=` dict (sent as `x-amz-meta-K: V`).
      `trailer=1` makes botocore send the body as it does over TLS: aws-chunked, with the
      CRC32 in a trailer (forced here over plain HTTP by an event hook).
  get key=K [checksum=1]
      client.get_object, reading the body to the end; `checksum=1` passes
      ChecksumMode="ENABLED", so botocore validates the body against x-amz-checksum-crc32.
  head key=K [checksum=1]
      client.head_object; reports the object's user metadata in "metadata".
  delete key=K
      client.delete_object.
  delete_many keys=K1,K2,...
      client.delete_objects.
  upload_file key=K size=N [seed=S]
      client.upload_file of N pseudo-random bytes (random.Random(S)) from a temporary file,
      with boto3's default TransferConfig: multipart from 8 MiB on, in 8 MiB parts. Reports
      the ETag S3 would give (computed here from the bytes), then HEADs the key and reads it
      back: "head_etag", "read_back_md5", "identical". A failed upload (boto3's
      S3UploadFailedError) is reported in "error" and the key is still looked at.
  mpu key=K sizes=N1,N2,... [order=2,1] [upload_id=ID] [if_none_match=*] [metadata=K:V,...]
      The low-level calls: create_multipart_upload (with `Metadata=`), upload_part per size, then
      complete_multipart_upload listing the parts in `order` (default: as uploaded) under
      `upload_id` (default: the created one).

The client: boto3.client("s3", endpoint_url=BASE_URL, region us-east-1, dummy credentials,
Config(s3={"addressing_style": "path"}, retries={"mode": "standard"})): standard mode,
3 attempts in all.

Prints one JSON line: {"steps": [...]}, one entry per STEP with "ok", "status", "headers"
(relevant response headers, lowercased), "attempts" (per HTTP attempt the SDK made: its
amz-sdk-invocation-id, amz-sdk-request and the request headers that matter here), and
either the operation's result fields or "error" (botocore's Error dict: Code, Message,
Condition, ...).
"""

import hashlib
import os
import random
import sys
import tempfile

import boto3
from boto3.exceptions import S3UploadFailedError
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


def pairs(text):
    """`K:V,K2:V2` as a dict."""
    return dict(item.split(":", 1) for item in text.split(",") if item)


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

    def record_attempt(request, event_name="", **_):
        attempt = lowered(request.headers, REQUEST_HEADERS)
        attempt["operation"] = event_name.rsplit(".", 1)[-1]
        attempts.append(attempt)

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
                if "metadata" in params:
                    call["Metadata"] = pairs(params.pop("metadata"))
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
                    metadata=result.get("Metadata", {}),
                )
            elif op == "delete":
                result = client.delete_object(Bucket=BUCKET, Key=params.pop("key"))
            elif op == "upload_file":
                key = params.pop("key")
                data = random.Random(int(params.pop("seed", "1"))).randbytes(int(params.pop("size")))
                part_size = 8 * 1024 * 1024
                parts = [data[i : i + part_size] for i in range(0, len(data), part_size)]
                if len(data) >= part_size:
                    md5s = b"".join(hashlib.md5(p).digest() for p in parts)
                    entry["expected_etag"] = f'"{hashlib.md5(md5s).hexdigest()}-{len(parts)}"'
                else:
                    entry["expected_etag"] = f'"{hashlib.md5(data).hexdigest()}"'
                entry["md5"] = hashlib.md5(data).hexdigest()
                with tempfile.TemporaryDirectory() as folder:
                    path = os.path.join(folder, "upload.bin")
                    with open(path, "wb") as f:
                        f.write(data)
                    try:
                        client.upload_file(path, BUCKET, key)
                        entry["uploaded"] = True
                    except S3UploadFailedError as e:
                        entry["uploaded"] = False
                        entry["upload_error"] = str(e)
                entry["upload_attempts"] = list(attempts)
                result = client.head_object(Bucket=BUCKET, Key=key)
                entry["head_etag"] = result["ETag"]
                read_back = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                entry["read_back_md5"] = hashlib.md5(read_back).hexdigest()
                entry["identical"] = read_back == data
            elif op == "mpu":
                key = params.pop("key")
                sizes = [int(n) for n in params.pop("sizes").split(",")]
                metadata = pairs(params.pop("metadata", ""))
                created = client.create_multipart_upload(Bucket=BUCKET, Key=key, Metadata=metadata)
                upload_id = created["UploadId"]
                uploaded = []
                for number, size in enumerate(sizes, start=1):
                    body = random.Random(number).randbytes(size)
                    part = client.upload_part(
                        Bucket=BUCKET, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                    )
                    uploaded.append({"ETag": part["ETag"], "PartNumber": number})
                order = params.pop("order", None)
                if order is not None:
                    uploaded = [uploaded[int(n) - 1] for n in order.split(",")]
                call = {
                    "Bucket": BUCKET,
                    "Key": key,
                    "UploadId": params.pop("upload_id", upload_id),
                    "MultipartUpload": {"Parts": uploaded},
                }
                if "if_none_match" in params:
                    call["IfNoneMatch"] = params.pop("if_none_match")
                result = client.complete_multipart_upload(**call)
                entry.update(etag=result["ETag"], upload_id=upload_id)
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
