"""The refund agent made durable with DBOS: one process life of it.

    python durable_refund_agent.py start|recover --script naive|careful --mcp-url URL
        --db DB.sqlite --workflow-id ID --payment-intent PI --amount N --result OUT.json

pydantic-ai's `DBOSDurability` capability makes each model request and each MCP call of the
agent a DBOS step, checkpointed in DBOS's system database (SQLite here) once it finishes; the
agent runs inside a DBOS workflow of ours (`refund_workflow`). `start` starts the workflow
under the id given and waits for its result; `recover` is the process that comes after a
crash: `DBOS.launch()` recovers the workflows left pending on this executor, which replays
the finished steps from the database and runs again the first one that never finished, and
the process waits for the workflow's result.

The tools are `twice serve --mcp-port`'s, over streamable HTTP: serve runs on its own, so the
agent's process can die and come back while the scenario's world stays. With `--script
careful` the idempotency key is the workflow id and the plan step. The result (the agent's
answer, its claim, its transcript, the DBOS steps, and which process made each model
request) is written to `--result` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from dbos import DBOS, DBOSConfig, SetWorkflowID
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelMessagesTypeAdapter

from refund_agents import SCRIPTS, Task, claim_of, http_toolset, make_agent, transcript

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("mode", choices=["start", "recover"])
parser.add_argument("--script", choices=sorted(SCRIPTS), required=True)
parser.add_argument("--mcp-url", required=True)
parser.add_argument("--db", required=True, help="DBOS's SQLite system database (the same file for every life)")
parser.add_argument("--workflow-id", required=True)
parser.add_argument("--payment-intent", required=True)
parser.add_argument("--amount", type=int, required=True)
parser.add_argument("--intent-id", required=True, help="the scenario's intent id, for the claim")
parser.add_argument("--result", required=True)
ARGS = parser.parse_args()
TASK = Task(ARGS.payment_intent, ARGS.amount)
#: Each real invocation of the scripted model, with the pid of the process that made it: a
#: request DBOS replays from its record does not call the model again.
MODEL_LOG = Path(ARGS.result).with_suffix(".model.jsonl")

config: DBOSConfig = {
    "name": "twice-refund-agent",
    "system_database_url": f"sqlite:///{ARGS.db}",
    # Pinned, so the next process recovers this one's workflows (DBOS recovers only the
    # application version it runs).
    "application_version": "refund-agent-1",
    "executor_id": "local",
    "log_level": "WARNING",
}
DBOS(config=config)


def _workflow_key() -> str:
    """The careful agent's key: the workflow's id and the plan step, stable across lives."""
    return f"{DBOS.workflow_id}:refund:step-1"


def _logged(model):  # type: ignore[no-untyped-def]
    def logged(messages, info):  # type: ignore[no-untyped-def]
        response = model(messages, info)
        with MODEL_LOG.open("a") as log:
            parts = [repr(p) for p in response.parts]
            log.write(json.dumps({"pid": os.getpid(), "messages": len(messages), "response": parts}) + "\n")
        return response

    return logged


script = SCRIPTS[ARGS.script]
model = script(TASK, _workflow_key) if ARGS.script == "careful" else script(TASK)
agent = make_agent(_logged(model), http_toolset(ARGS.mcp_url), capabilities=[DBOSDurability()])


@DBOS.workflow()
async def refund_workflow(prompt: str) -> dict:
    result = await agent.run(prompt)
    messages = ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json")
    return {"output": result.output, "messages": messages}


async def main() -> int:
    print(f"[{ARGS.mode}] pid {os.getpid()}", flush=True)
    DBOS.launch()
    try:
        if ARGS.mode == "start":
            with SetWorkflowID(ARGS.workflow_id):
                handle = await DBOS.start_workflow_async(refund_workflow, TASK.prompt)
        else:
            handle = await DBOS.retrieve_workflow_async(ARGS.workflow_id)
        status_before = (await handle.get_status()).status
        out = await handle.get_result()
        messages = ModelMessagesTypeAdapter.validate_python(out["messages"])
        steps = await DBOS.list_workflow_steps_async(ARGS.workflow_id)
        result = {
            "mode": ARGS.mode,
            "pid": os.getpid(),
            "status_before": str(status_before),
            "output": out["output"],
            "claim": claim_of(ARGS.intent_id, TASK, out["output"], messages),
            "transcript": transcript(messages),
            "steps": [s["function_name"] for s in steps],
            "model_calls": [json.loads(line) for line in MODEL_LOG.read_text().splitlines()],
        }
        Path(ARGS.result).write_text(json.dumps(result, indent=2))
        print(f"[{ARGS.mode}] {out['output']}", flush=True)
        return 0
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
