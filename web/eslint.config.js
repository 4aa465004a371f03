import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/**", "node_modules/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["e2e/**/*.mjs", "test/**/*.mjs"],
    languageOptions: {
      // Node, and the browser globals of the functions page.evaluate runs in the page.
      globals: { process: "readonly", Buffer: "readonly", URL: "readonly", console: "readonly", setTimeout: "readonly", fetch: "readonly", document: "readonly", window: "readonly", performance: "readonly", sessionStorage: "readonly", MutationObserver: "readonly", getComputedStyle: "readonly" },
    },
  },
);
