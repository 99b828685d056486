// Paths of the examples, for the tests.
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

/** A path under examples/js. */
export function examples(...parts) {
  return join(root, ...parts);
}
