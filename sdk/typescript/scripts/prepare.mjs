// prepare: build dist/ whenever npm prepares this package, including when
// another project installs it from a folder or a clone
// (`npm install /path/to/sdk/typescript`): npm then runs this script in the
// package's folder without installing the package's own devDependencies, so
// it installs them first (locked by package-lock.json, scripts off) when
// TypeScript is missing, then compiles src/ into dist/.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const run = (cmd, args) => execFileSync(cmd, args, { cwd: root, stdio: ["ignore", "inherit", "inherit"] });

if (!existsSync(tsc)) {
  // The npm running this script, else the one on PATH.
  const npmCli = process.env.npm_execpath;
  const args = ["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"];
  if (npmCli && npmCli.endsWith(".js")) {
    run(process.execPath, [npmCli, ...args]);
  } else {
    run("npm", args);
  }
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
