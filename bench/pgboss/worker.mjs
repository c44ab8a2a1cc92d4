// pg-boss worker: boss.work() with a batch handler, as pg-boss's docs describe for
// throughput (batchSize + burstWhenBatchFull: fetch again at once while batches come
// back full).  Runs until SIGTERM/SIGINT; the orchestrator decides when a drain is done.
import { loadPgBoss, makeBoss, QUEUE, ProbeWriter } from './common.mjs';

const BATCH = Number(process.env.BENCH_PGBOSS_BATCH || 100);
const { PgBoss } = await loadPgBoss();
const boss = makeBoss(PgBoss, { supervise: false, schedule: false });
const probe = new ProbeWriter();
await boss.start();
await boss.work(QUEUE, { batchSize: BATCH, burstWhenBatchFull: true }, async (jobs) => {
  probe.hit(jobs.length, jobs[0].data.i);
});
console.error(`pg-boss worker ready (batchSize=${BATCH})`);
let stopping = false;
async function shutdown() {
  if (stopping) return;
  stopping = true;
  await boss.stop({ graceful: true, timeout: 5000 });
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
