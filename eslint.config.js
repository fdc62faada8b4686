// ESLint, typed: typescript-eslint's recommendedTypeChecked over every TypeScript file of the project
// (src, oauth, mcp, test, bench, scripts, .ci), read through tsconfig.json by the project service, so a
// rule sees the same types as `npm run typecheck`. Plain JavaScript (the scripts, this file) gets the
// untyped recommended set. An exception in code is a one-line
// `// eslint-disable-next-line <rule> -- <reason>`; a disable without a reason or one that no longer
// applies is itself a finding. docs/architecture.md says how this fits with Prettier and dependency-cruiser.
import { defineConfig } from 'eslint/config';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default defineConfig(
  {
    ignores: [
      'node_modules/',
      'dist/',
      'data/',
      'coverage/',
      'migrations/',
      '.ci/node22/',
      '.ci/out/',
      'bench/results/',
    ],
  },
  {
    linterOptions: { reportUnusedDisableDirectives: 'error' },
  },
  js.configs.recommended,
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // In recommendedTypeChecked already; named here because the house depends on them: a promise nobody
      // awaits loses its error, and an async callback where a void one is expected loses it too.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // `_name` says "deliberately unused" (a handler's fixed signature, a destructured leftover).
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
    },
  },
  {
    // Every transaction opens through src/db/transaction.ts, which writes what must come last (the audit
    // log's chain) just before COMMIT; a transaction opened on the driver directly would skip that.
    files: ['src/**/*.ts', 'oauth/**/*.ts', 'mcp/**/*.ts'],
    ignores: ['src/db/transaction.ts'],
    rules: {
      // A file a newcomer reads whole: past 400 lines it holds more than one thing (STYLE.md).
      'max-lines': ['error', { max: 400 }],
      // An AsyncLocalStorage once entered turns on promise hooks for every promise of the process
      // (docs/decisions/0165-audit-origin-is-an-argument.md): pass the value instead.
      'no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: 'node:async_hooks',
              importNames: ['AsyncLocalStorage'],
              message: 'Pass the value as an argument.',
            },
            {
              name: 'async_hooks',
              importNames: ['AsyncLocalStorage'],
              message: 'Pass the value as an argument.',
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "CallExpression[callee.type='MemberExpression'][callee.property.name='transaction']",
          message: 'Open transactions with transaction() from src/db/transaction.ts.',
        },
      ],
    },
  },
  {
    files: ['**/*.{js,mjs,cjs}'],
    languageOptions: { globals: { ...globals.node } },
  },
);
