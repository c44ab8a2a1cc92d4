// Shared by worker.mjs and client.mjs: loads pg-boss from bench/.venvs/pgboss and
// implements the same shared-memory probe as bench/drivers/probe.py.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const URL = process.env.DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/bench_pgboss';
export const QUEUE = 'noop';
export const SLOT_SIZE = 64;
export const SLOTS = 64;

export async function loadPgBoss() {
  const dir = process.env.BENCH_NODE_ENV;  // bench/.venvs/pgboss
  const require = createRequire(path.join(dir, 'package.json'));
  const entry = require.resolve('pg-boss');
  const mod = await import(pathToFileURL(entry).href);
  const version = JSON.parse(fs.readFileSync(path.join(dir, 'node_modules/pg-boss/package.json'))).version;
  return { PgBoss: mod.PgBoss || mod.default, version };
}

// pg-boss as its docs recommend for low latency: the instance-level LISTEN/NOTIFY
// listener on, and the queue created with notify: true.
export function makeBoss(PgBoss, extra = {}) {
  const boss = new PgBoss({ connectionString: URL, useListenNotify: true, ...extra });
  boss.on('error', (e) => console.error('pg-boss error', e));
  return boss;
}

export function nowNs() {
  return process.hrtime.bigint();  // CLOCK_MONOTONIC, same clock as Python's monotonic_ns()
}

// Writer: a fixed slot (BENCH_PROBE_SLOT); pid, count, first_ns, last_ns, last_seq.
export class ProbeWriter {
  constructor() {
    const file = process.env.BENCH_PROBE_FILE;
    this.fd = file ? fs.openSync(file, 'r+') : null;
    this.slot = Number(process.env.BENCH_PROBE_SLOT || 48);
    this.count = 0n;
    this.first = 0n;
    this.buf = Buffer.alloc(40);
  }
  // one pwrite per batch of jobs (the handler gets arrays)
  hit(n, seq) {
    if (this.fd === null) return;
    const now = nowNs();
    this.count += BigInt(n);
    if (this.first === 0n) this.first = now;
    const b = this.buf;
    b.writeBigInt64LE(BigInt(process.pid), 0);
    b.writeBigInt64LE(this.count, 8);
    b.writeBigInt64LE(this.first, 16);
    b.writeBigInt64LE(now, 24);
    b.writeBigInt64LE(BigInt(seq), 32);
    fs.writeSync(this.fd, b, 0, 40, this.slot * SLOT_SIZE);
  }
}

export class ProbeReader {
  constructor() {
    this.fd = fs.openSync(process.env.BENCH_PROBE_FILE, 'r');
    this.buf = Buffer.alloc(SLOT_SIZE * SLOTS);
  }
  seen(seq) {
    fs.readSync(this.fd, this.buf, 0, this.buf.length, 0);
    const s = BigInt(seq);
    for (let i = 0; i < SLOTS; i++) {
      if (this.buf.readBigInt64LE(i * SLOT_SIZE + 32) === s) return this.buf.readBigInt64LE(i * SLOT_SIZE + 24);
    }
    return null;
  }
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));
export function sleepMs(ms) {  // blocking sub-millisecond sleep (setTimeout cannot go below 1 ms)
  Atomics.wait(sleeper, 0, 0, ms);
}
