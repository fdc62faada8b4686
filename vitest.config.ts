import { defineConfig } from 'vitest/config';

// Each test file starts its own server on its own database (test/helpers/server.ts), so files run in
// parallel processes without sharing state. TEST_DATABASE_URL selects a real PostgreSQL; unset, PGlite.
// The global setup migrates one database per run, which each file's database starts as a copy of.
export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
