# syntax=docker/dockerfile:1
# svc in a container (docs/deploying.md § Container): a build stage compiles the TypeScript; the runtime
# stage has production dependencies only, runs as the unprivileged `node` user, and is healthy when
# GET /healthz answers.

FROM node:20-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY oauth ./oauth
COPY mcp ./mcp
RUN npm run build

FROM node:20-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY migrations ./migrations
# The embedded database (when DATABASE_URL is unset) needs a writable directory.
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# The compiled server directly: scripts/start.mjs would look for the TypeScript sources to rebuild.
CMD ["node", "dist/src/main.js"]
