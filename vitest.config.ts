import { defineConfig } from 'vitest/config';

// Each test file starts its own server on its own database (test/helpers/server.ts), so files run in
// parallel processes without sharing state. TEST_DATABASE_URL selects a real PostgreSQL; unset, PGlite.
// The global setup migrates one database per run, which each file's database starts as a copy of.
//
// Three projects (docs/testing.md):
// - `fast` (`npm test`): every test file but the two sets below; the README's command.
// - `e2e` (`npm run test:e2e`): the pages in Chromium and the clients run as child processes (the CLI at
//   a pseudo-terminal, mcp-remote): more than half of all the tests' CPU on a two-core machine.
// - `slow` (`npm run test:slow`): fault injection, soak, property, multi-process and scale runs, each
//   of which spends most of its time waiting on purpose (a black-holed database, a killed worker, a
//   lease that must lapse) or repeating one check many times. CI (.ci/run) runs all three.
// A test file path run directly (`npx vitest run test/x.test.ts`) runs in whichever project holds it.
export const E2E_TESTS = [
  'test/**/*-browser.test.ts',
  'test/portal/portal-first-run.test.ts',
  'test/mcp/mcp-remote.test.ts',
  'test/cli/cli-*.test.ts',
];

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
          exclude: [...SLOW_TESTS, ...E2E_TESTS],
          // A worker process runs its files one after another with the modules it already loaded (svc's
          // own, Express, the SDKs): loading them again for every file was most of a file's cost.
          // Files share no state through them: each starts its own server on its own database and
          // closes it (docs/testing.md).
          isolate: false,
          // A fast file spends most of its time waiting (on its server's sockets, a child process,
          // Chromium): four at a time fill two cores (decision record 0147).
          maxWorkers: 4,
        },
      },
      {
        extends: true,
        // Run as the fast set is (one module graph and one Chromium per worker, four files at a time);
        // its own project so that `npm test` stays within minutes on a two-core machine.
        test: { name: 'e2e', include: E2E_TESTS, exclude: SLOW_TESTS, isolate: false, maxWorkers: 4 },
      },
      // One module graph per worker too (decision record 0174): a fresh process per file loaded svc's
      // modules again for each of these files, a third of their run on a busy machine.
      { extends: true, test: { name: 'slow', include: SLOW_TESTS, isolate: false } },
    ],
  },
});
