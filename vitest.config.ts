import { defineConfig } from 'vitest/config';

// Each test file starts its own server on its own database (test/helpers/server.ts), so files run in
// parallel processes without sharing state. TEST_DATABASE_URL selects a real PostgreSQL; unset, PGlite.
// The global setup migrates one database per run, which each file's database starts as a copy of.
//
// Two projects (docs/testing.md):
// - `fast` (`npm test`): every test file but the long runs below; the README's command.
// - `slow` (`npm run test:slow`): fault injection, soak, property, multi-process and scale runs, each
//   of which spends most of its time waiting on purpose (a black-holed database, a killed worker, a
//   lease that must lapse) or repeating one check many times. CI (.ci/run) runs both.
// A test file path run directly (`npx vitest run test/x.test.ts`) runs in whichever project holds it.
export const SLOW_TESTS = [
  'test/**/faults-*.test.ts',
  'test/**/*-property.test.ts',
  'test/**/*cluster*.test.ts',
  'test/**/scale-*.test.ts',
  'test/**/robustness-input.test.ts',
];

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    // vitest's default is the cores less one: a single file at a time on a 2-core machine. The files
    // wait on sockets and child processes much of the time, so two at a time use both cores (the slow
    // set's timing-bound runs keep two; the fast set takes four, below).
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: {
          name: 'fast',
          include: ['test/**/*.test.ts'],
          exclude: SLOW_TESTS,
          // A worker process runs its files one after another with the modules it already loaded (svc's
          // own, Express, the SDKs): loading them again for every file was most of a file's cost.
          // Files share no state through them: each starts its own server on its own database and
          // closes it (docs/testing.md). The slow set keeps a fresh process per file.
          isolate: false,
          // A fast file spends most of its time waiting (on its server's sockets, a child process,
          // Chromium): four at a time fill two cores (decision record 0147).
          maxWorkers: 4,
        },
      },
      { extends: true, test: { name: 'slow', include: SLOW_TESTS } },
    ],
  },
});
