// The console's build: one index.html and hashed files under assets/, which the C++ build
// embeds in the larql binary (src/server/static_files.h). No CDN: everything is bundled.
import { defineConfig } from "vite";

export default defineConfig({
  base: "/",
  build: {
    target: "es2022",
    assetsDir: "assets",
    chunkSizeWarningLimit: 1500,
    sourcemap: false,
  },
});
