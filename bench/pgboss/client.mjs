// pg-boss producer, same commands and JSON output as bench/drivers/clientlib.py:
//   node client.mjs schema | enqueue_single N | enqueue_bulk N | prefill N | pickup N BUDGET_S
//   node client.mjs serve_single enqueue_single   (then "run N" / "quit" on stdin)
import readline from 'node:readline';
import { loadPgBoss, makeBoss, QUEUE, nowNs, ProbeReader, sleepMs } from './common.mjs';

const PICKUP_SEQ_BASE = 1000000000;
const WARMUP = 20;
const [cmd, a1, a2] = process.argv.slice(2);
const { PgBoss, version } = await loadPgBoss();
// a producer needs no maintenance/scheduling loops of its own
const boss = makeBoss(PgBoss, { supervise: false, schedule: false, useListenNotify: false });
await boss.start();

const sendOne = (i) => boss.send(QUEUE, { i });
const sendMany = (seqs) => boss.insert(QUEUE, seqs.map((i) => ({ data: { i } })));
const secs = (t0) => Number(nowNs() - t0) / 1e9;
let out;

if (cmd === 'schema') {
  await boss.createQueue(QUEUE, { notify: true });
  out = { ok: true, version };
} else if (cmd === 'enqueue_single') {
  const n = Number(a1);
  for (let i = 0; i < WARMUP; i++) await sendOne(-1 - i);
  const t0 = nowNs();
  for (let i = 0; i < n; i++) await sendOne(i);
  const s = secs(t0);
  out = { n, seconds: s, rate: n / s, warmup_jobs: WARMUP };
} else if (cmd === 'serve_single' && a1 === 'enqueue_single') {
  // clientlib.serve_single: warm up, then time each block of "run N" alone (no IPC)
  for (let i = 0; i < WARMUP; i++) await sendOne(-1 - i);
  process.stdout.write(JSON.stringify({ ready: true, warmup_jobs: WARMUP }) + '\n');
  let seq = 0;
  for await (const line of readline.createInterface({ input: process.stdin })) {
    const words = line.trim().split(/\s+/);
    if (words[0] === 'quit') break;
    if (words.length !== 2 || words[0] !== 'run') throw new Error(`serve_single: unknown ${line}`);
    const n = Number(words[1]);
    const t0 = nowNs();
    for (const end = seq + n; seq < end; seq++) await sendOne(seq);
    process.stdout.write(JSON.stringify({ n, seconds: secs(t0) }) + '\n');
  }
} else if (cmd === 'enqueue_bulk') {
  const n = Number(a1);
  await sendMany(Array.from({ length: 100 }, (_, k) => -100 + k));
  const seqs = Array.from({ length: n }, (_, k) => k);
  const t0 = nowNs();
  await sendMany(seqs);
  const s = secs(t0);
  out = { n, seconds: s, rate: n / s, warmup_jobs: 100 };
} else if (cmd === 'prefill') {
  const n = Number(a1);
  const t0 = nowNs();
  for (let start = 0; start < n; start += 50000) {
    const end = Math.min(n, start + 50000);
    await sendMany(Array.from({ length: end - start }, (_, k) => start + k));
  }
  out = { n, seconds: secs(t0) };
} else if (cmd === 'pickup') {
  const samples = Number(a1);
  const budgetNs = BigInt(Math.round(Number(a2) * 1e9));
  const [gapMin, gapMax] = process.argv.length >= 7
    ? [Number(process.argv[5]) * 1000, Number(process.argv[6]) * 1000] : [20, 50];
  const reader = new ProbeReader();
  let seed = 42;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const lat = [];
  let timeouts = 0;
  const waitSeen = (seq, t0, timeoutNs) => {
    for (;;) {
      const ts = reader.seen(seq);
      if (ts !== null) return ts;
      if (nowNs() - t0 > timeoutNs) return null;
      sleepMs(0.1);
    }
  };
  // warm-up: the worker may still be starting
  for (let w = 1; w <= 3; w++) {
    await sendOne(PICKUP_SEQ_BASE - w);
    waitSeen(PICKUP_SEQ_BASE - w, nowNs(), 60_000_000_000n);
  }
  const tEnd = nowNs() + budgetNs;
  for (let k = 0; k < samples && nowNs() < tEnd && timeouts < 3; k++) {
    await new Promise((r) => setTimeout(r, gapMin + (gapMax - gapMin) * rnd()));
    const seq = PICKUP_SEQ_BASE + k;
    await sendOne(seq);
    const tCommit = nowNs();
    const ts = waitSeen(seq, tCommit, 10_000_000_000n);
    if (ts === null) timeouts++;
    else lat.push(Number(ts - tCommit) / 1e6);
  }
  out = { latencies_ms: lat, timeouts, samples: lat.length };
} else {
  throw new Error(`unknown command ${cmd}`);
}
await boss.stop({ graceful: false, timeout: 1000 });
if (out) process.stdout.write(JSON.stringify(out) + '\n');
process.exit(0);
