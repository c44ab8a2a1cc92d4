// pg-boss side of bench/async_io.py: jobs that await BENCH_AIO_MS ms, C of them in flight.
//   node aio.mjs schema | prefill N | worker C
// The worker: boss.work() with localConcurrency workers, each taking a batch of
// BENCH_PGBOSS_BATCH jobs (default 25: C/25 workers; bench/README.md says why) and awaiting
// all of them at once.
import { setTimeout as sleep } from 'node:timers/promises';
import { loadPgBoss, makeBoss, ProbeWriter } from './common.mjs';

const QUEUE = 'asleep';
const MS = Number(process.env.BENCH_AIO_MS || 50);
const [cmd, a1] = process.argv.slice(2);
const { PgBoss } = await loadPgBoss();

if (cmd === 'worker') {
  const c = Number(a1);
  const batchSize = Math.min(c, Number(process.env.BENCH_PGBOSS_BATCH || 25));
  const localConcurrency = Math.max(1, Math.round(c / batchSize));
  const boss = makeBoss(PgBoss, { supervise: false, schedule: false });
  const probe = new ProbeWriter();
  await boss.start();
  await boss.work(QUEUE, { batchSize, localConcurrency, burstWhenBatchFull: true }, async (jobs) => {
    probe.hit(jobs.length, jobs[0].data.i);
    await Promise.all(jobs.map(() => sleep(MS)));
  });
  console.error(`pg-boss aio worker ready (batchSize=${batchSize}, localConcurrency=${localConcurrency})`);
  const shutdown = async () => {
    await boss.stop({ graceful: true, timeout: 5000 });
    process.exit(0);
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
} else {
  const boss = makeBoss(PgBoss, { supervise: false, schedule: false, useListenNotify: false });
  await boss.start();
  if (cmd === 'schema') {
    await boss.createQueue(QUEUE, { notify: true });
  } else if (cmd === 'prefill') {
    const n = Number(a1);
    for (let start = 0; start < n; start += 5000) {
      const end = Math.min(n, start + 5000);
      await boss.insert(QUEUE, Array.from({ length: end - start }, (_, k) => ({ data: { i: start + k } })));
    }
  } else {
    throw new Error(`unknown command ${cmd}`);
  }
  await boss.stop({ graceful: false, timeout: 1000 });
  process.exit(0);
}
