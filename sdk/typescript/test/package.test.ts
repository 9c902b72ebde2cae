// The package as npm installs it: it builds nothing on install (no install
// script), runs from the committed dist/, which must be the build of src/,
// and names node-postgres as the peer dependency it is. No database needed.
// integration/sdk_install_test.go installs it into fresh projects, from a
// clone and from `npm pack`'s tarball.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

// Compiled to dist/test/: the package is two levels up.
const pkgDir = new URL('../../', import.meta.url);
const pkg = JSON.parse(readFileSync(new URL('package.json', pkgDir), 'utf8')) as {
  scripts?: Record<string, string>;
  exports: Record<string, unknown>;
  files: string[];
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
};

test('no install-time script: nothing is built or written when the package is installed', () => {
  // npm runs these when it installs a package (prepare: from a folder or git).
  for (const s of ['preinstall', 'install', 'postinstall', 'prepublish', 'preprepare', 'prepare', 'postprepare']) {
    assert.equal(pkg.scripts?.[s], undefined, `package.json has a "${s}" script`);
  }
});

test('dist/ is the build of src/ (run `npm run build` and commit dist/ after changing src/)', () => {
  execFileSync(process.execPath, [new URL('scripts/build.mjs', pkgDir).pathname, '--check'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
});

test('every entry point has an import and a require condition, each with its types', () => {
  for (const entry of ['.', './receiver']) {
    const conditions = pkg.exports[entry] as Record<string, { types: string; default: string }>;
    assert.deepEqual(Object.keys(conditions), ['import', 'require'], entry);
    assert.match(conditions['import']!.default, /^\.\/dist\/[a-z]+\.js$/);
    assert.match(conditions['require']!.default, /^\.\/dist\/cjs\/[a-z]+\.js$/);
    assert.match(conditions['import']!.types, /\.d\.ts$/);
    assert.match(conditions['require']!.types, /^\.\/dist\/cjs\/.*\.d\.ts$/);
  }
  assert.ok(pkg.files.includes('dist'));
});

test('pg is a peer dependency with a bounded range, not a dependency', () => {
  assert.equal(pkg.dependencies?.['pg'], undefined);
  assert.match(pkg.peerDependencies?.['pg'] ?? '', /^\^8\.\d+\.\d+$/);
});
