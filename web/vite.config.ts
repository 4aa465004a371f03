// The console's build: one index.html and hashed files under assets/, which the C++ build
// embeds in the larql binary (src/server/static_files.h). No CDN: everything is bundled.
// Development: `LARQL_SERVER=http://127.0.0.1:8080 npm run dev` serves the sources with hot reload
// and forwards the API routes to that running `larql serve`.
import { defineConfig } from "vite";

const target = process.env.LARQL_SERVER;
const proxy = target ? { "/v1": target, "/metrics": target, "/health": target } : undefined;

export default defineConfig({
  base: "/",
  build: {
    target: "es2022",
    assetsDir: "assets",
    chunkSizeWarningLimit: 1500,
    sourcemap: false,
  },
  server: { proxy },
  preview: { proxy },
});
