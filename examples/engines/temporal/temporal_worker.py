"""One Temporal worker process for one of the two apps, as a deployment would run it:

    python temporal_worker.py --address 127.0.0.1:7233 --task-queue refunds --app idiomatic \
        --api-base http://127.0.0.1:PORT [--request-timeout-s S --settle-ms MS --read-lag-ms MS --acks A]

`Worker(client, task_queue, workflows, activities)` with a thread pool for the idiomatic app's
synchronous activity. Prints `worker ready` once it polls. The tests start it as a child
process so they can SIGKILL or SIGSTOP it at a scenario's request point.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import importlib
import sys

from temporalio.client import Client
from temporalio.worker import Worker


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--app", choices=("idiomatic", "careful"), required=True)
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--request-timeout-s", type=float, default=2.0)
    parser.add_argument("--settle-ms", type=int, default=500)
    parser.add_argument("--read-lag-ms", type=int, default=0)
    parser.add_argument("--acks", default="reliable")
    args = parser.parse_args(argv)

    app = importlib.import_module(f"temporal_{args.app}")
    app.configure(
        api_base=args.api_base,
        request_timeout_s=args.request_timeout_s,
        settle_ms=args.settle_ms,
        read_lag_ms=args.read_lag_ms,
        acks=args.acks,
    )
    client = await Client.connect(args.address, namespace=args.namespace)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=app.WORKFLOWS,
            activities=app.ACTIVITIES,
            activity_executor=pool,
            # One refund at a time: a worker busy with (or stopped in) an activity has no
            # activity poll outstanding, so a retry goes to a worker that can run it.
            max_concurrent_activities=1,
            # No sticky workflow cache: after a worker dies, its workflows' next task goes to
            # the shared queue at once instead of after the sticky queue's 5 s timeout.
            max_cached_workflows=0,
        )
        print("worker ready", flush=True)
        await worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
