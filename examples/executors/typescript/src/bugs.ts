/**
 * The classic bugs, one switch each, for the conformance kit.
 *
 * `executor.js --bug NAME` turns on exactly one of them; without `--bug` the executor is
 * correct. Each bug is one `if (bugs.BUG === "NAME")` in the code, at the place where the wrong
 * belief acts, so `grep -n 'BUG ===' src/*.ts` lists every difference from the correct
 * executor. The README says which catalog scenario catches each one, and with which invariant.
 */

/** Every bug, with the wrong belief it stands for. */
export const BUGS: Record<string, string> = {
  "key-per-attempt": "every attempt gets a new idempotency key",
  "memory-only": "intents live in memory only: a crash forgets them",
  "timeout-as-failure": 'a timeout means "it did not happen": failed',
  "trust-200": "a success is believed without a read-back, even where acks may lie",
  "trust-202": "an email the API accepted is taken as delivered: the recipient's inbox is never read",
  "re-sign-after-timeout": "after an uncertain broadcast, the transfer is signed again with the next nonce",
  "replacement-while-unknown": "a replacement runs while the intent it replaces is unknown",
  "constant-fencing-token":
    "a constant Fencing-Token: 1 and If-Match: * keep a stale worker out, so leases and row versions are not needed",
  "retry-403": "a refusal that needs a decision (401, 403, 400, 422) is a bad moment, retried like a 429",
  "no-fencing": "no fencing token on creates and no precondition on puts",
  "webhook-no-dedupe":
    "every webhook delivery is new work: its event id is never looked for, and the intents it starts begin afresh under a new key",
  "webhook-ack-first": "a delivery is answered 200 first, its event kept in memory for the pass: the 200 means it is done",
  "webhook-trusts-body": "a delivery's body is believed: no signature check, and its copy of the payment's status is the payment's",
};

/** The bug that is switched on (set once at start-up by executor.ts), or null. */
export let BUG: string | null = null;

/**
 * `--single-worker` (not a bug): the executor runs as the only worker, so it takes no leases
 * and sends no fencing token.
 */
export let SINGLE_WORKER = false;

export function configure(bug: string | null, singleWorker: boolean): void {
  BUG = bug;
  SINGLE_WORKER = singleWorker;
}
