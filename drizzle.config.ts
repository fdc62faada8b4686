import { defineConfig } from 'drizzle-kit';

// Migrations are generated from the tables in src/db/tables and applied at start-up (src/db/migrate.ts).
export default defineConfig({
  dialect: 'postgresql',
  schema: './src/db/schema.ts',
  out: './migrations',
});
