# syntax=docker/dockerfile:1
# svc in a container (docs/deploying.md § Container): a build stage compiles the TypeScript, a deps stage
# installs the production dependencies, and the runtime stage copies both onto a clean node:20-slim. It runs
# as the unprivileged `node` user and is healthy when GET /healthz answers.

# The lock file is written by npm 11 (the version this project develops with). node:20-slim ships npm 10,
# which misreads npm 11's optional peer entries (vitest's vite → esbuild) and refuses `npm ci` with
# "Missing: esbuild@… from lock file" (seen building this file with podman). The install stages therefore
# run npm 11; the runtime image keeps the base's npm untouched, since it runs no npm.
FROM node:20-slim AS npm11
RUN npm install --global npm@11 --no-audit --no-fund --loglevel=error

FROM npm11 AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY oauth ./oauth
COPY mcp ./mcp
RUN npm run build

FROM npm11 AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM node:20-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data
WORKDIR /app
COPY package.json package-lock.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY migrations ./migrations
# The terminal client's guide, served at /docs/cli (svc --help points there).
COPY docs/cli.md ./docs/cli.md
# The embedded database (when DATABASE_URL is unset) needs a writable directory.
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# The compiled server directly: scripts/start.mjs would look for the TypeScript sources to rebuild.
CMD ["node", "dist/src/main.js"]
