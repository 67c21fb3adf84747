/**
 * An append-only file of JSON records, one a line, that several processes share: the adapter's
 * durable state where the Python kit has SQLite (Node 20 has no `node:sqlite`).
 *
 * - Every record is one `write(2)` on a descriptor opened with `O_APPEND`, so that records of
 *   several workers never interleave, followed by `fsync`: a record is durable when `append`
 *   returns (before `propose_ok`, docs/protocol.md §8).
 * - A record is written as `\n{...}\n`. A worker SIGKILLed in the middle of a write leaves a
 *   part of a line; the leading newline of the next record ends it, and a part of a JSON object
 *   never parses, so it is skipped: no record is ever lost to another's torn write.
 * - Readers read only what is new since they last looked, and only up to the last newline:
 *   a record still being written is read once it is whole.
 *
 * @module
 */

import { closeSync, fstatSync, fsyncSync, openSync, readSync, writeSync } from "node:fs";
import { dirname } from "node:path";

export class JsonLinesLog {
  private readonly fd: number;
  /** How far this process has read: the byte after the last whole line it has seen. */
  private offset = 0;

  constructor(readonly path: string) {
    this.fd = openSync(path, "a+");
    syncDirectory(dirname(path)); // the file's own name is durable too
  }

  /** Appends `record`, durably: on disk when this returns. */
  append(record: unknown): void {
    const line = Buffer.from(`\n${JSON.stringify(record)}\n`, "utf8");
    // One write: with O_APPEND it lands whole at the end, whatever other workers append.
    const written = writeSync(this.fd, line);
    if (written !== line.length) throw new Error(`${this.path}: wrote ${written} of ${line.length} bytes`);
    fsyncSync(this.fd);
  }

  /** The records appended (by any process) since this one last looked, in file order. */
  readNew(): unknown[] {
    const size = fstatSync(this.fd).size;
    if (size <= this.offset) return [];
    const chunk = Buffer.alloc(size - this.offset);
    let got = 0;
    while (got < chunk.length) {
      const n = readSync(this.fd, chunk, got, chunk.length - got, this.offset + got);
      if (n === 0) break;
      got += n;
    }
    const whole = chunk.subarray(0, got).lastIndexOf(0x0a) + 1;
    this.offset += whole;
    return parseRecords(chunk.subarray(0, whole));
  }

  close(): void {
    closeSync(this.fd);
  }
}

/** The records of whole lines; blank lines and torn ones (not JSON) are skipped. */
function parseRecords(bytes: Buffer): unknown[] {
  const records: unknown[] = [];
  for (const line of bytes.toString("utf8").split("\n")) {
    if (line === "") continue;
    try {
      records.push(JSON.parse(line));
    } catch {
      // A worker killed in the middle of this write: the record was never acknowledged.
    }
  }
  return records;
}

/** Makes a directory's entries durable; a system that cannot fsync a directory is let be. */
function syncDirectory(path: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    fsyncSync(fd);
  } catch {
    // Not every system lets a directory be opened or synced (its entries are then the
    // file system's business).
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
