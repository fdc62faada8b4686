import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { createProject, forkProject } from '../../src/projects/service.js';
import { readFile, writeFile } from '../../src/projects/content.js';
import { MAX_FILE_BYTES, PROJECT_QUOTA_BYTES } from '../../src/projects/schema.js';
import { AppError } from '../../src/http/errors.js';

// File limits through the real service and database (CONTRACT §10: bytes ≤ 5 MB; our 50 MB per
// project). Called in-process: pushing 50 MB through JSON-RPC would only measure base64.

let server: TestServer;
let user: TestUser;
beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

const code = async (p: Promise<unknown>) => {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return err instanceof AppError ? err.code : String(err);
  }
};

describe('file limits', () => {
  it('takes exactly 5 MB, refuses one byte more; replacing a file keeps its id; a fork copies the bytes', async () => {
    const db = server.deps.db;
    const actor = { userId: user.userId };
    const p = await createProject(db, actor, { orgKey: user.orgKey, name: 'Limits' });
    const full = Buffer.alloc(MAX_FILE_BYTES, 7);
    const over = {
      path: 'over.bin',
      bytes: Buffer.alloc(MAX_FILE_BYTES + 1),
      mediaType: 'application/octet-stream',
    };
    expect(await code(writeFile(db, actor, p.id, over))).toBe('FILE_TOO_LARGE');
    const first = await writeFile(db, actor, p.id, {
      path: 'big.bin',
      bytes: Buffer.from('first'),
      mediaType: 'application/octet-stream',
    });
    const replaced = await writeFile(db, actor, p.id, {
      path: 'big.bin',
      bytes: Buffer.from('small'),
      mediaType: 'text/plain',
    });
    expect(replaced).toMatchObject({ id: first.id, size: 5, media_type: 'text/plain' });
    await writeFile(db, actor, p.id, {
      path: 'full.bin',
      bytes: full,
      mediaType: 'application/octet-stream',
    });
    const fork = await forkProject(db, actor, p.id, {});
    const copied = await readFile(db, actor, fork.id, { path: 'full.bin' });
    expect(copied.size).toBe(MAX_FILE_BYTES);
    expect(Buffer.from(copied.content, 'base64').equals(full)).toBe(true);
  }, 60_000);

  // 50 MB of bytea writes take a minute on the embedded PGlite; the rule is the same SQL on both.
  it.skipIf(storageMode() === 'pglite')(
    'stops a project at 50 MB, counting a replaced file at its new size',
    async () => {
      const db = server.deps.db;
      const actor = { userId: user.userId };
      const p = await createProject(db, actor, { orgKey: user.orgKey, name: 'Quota' });
      const full = Buffer.alloc(MAX_FILE_BYTES, 7);
      for (let i = 0; i < PROJECT_QUOTA_BYTES / MAX_FILE_BYTES; i++) {
        expect(
          await code(
            writeFile(db, actor, p.id, {
              path: `f${i}.bin`,
              bytes: full,
              mediaType: 'application/octet-stream',
            }),
          ),
        ).toBe('ok');
      }
      expect(
        await code(
          writeFile(db, actor, p.id, {
            path: 'one-more.txt',
            bytes: Buffer.from('x'),
            mediaType: 'text/plain',
          }),
        ),
      ).toBe('QUOTA_EXCEEDED');
      expect(
        await code(
          writeFile(db, actor, p.id, { path: 'f0.bin', bytes: full, mediaType: 'application/octet-stream' }),
        ),
      ).toBe('ok');
      expect(
        await code(
          writeFile(db, actor, p.id, {
            path: 'f0.bin',
            bytes: Buffer.from('small'),
            mediaType: 'text/plain',
          }),
        ),
      ).toBe('ok');
      expect((await readFile(db, actor, p.id, { path: 'f0.bin' })).content).toBe('small');
    },
    60_000,
  );
});
