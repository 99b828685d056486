// Run ids derived the way jetrun derives a nested run's id (Go: parent.RunID).

import { createHash } from 'node:crypto';

const HEX32 = '0123456789abcdefghijklmnopqrstuv';

/**
 * The id of the run that parent starts for one tool call: "tc-" and the
 * lowercase base32hex of the first 20 bytes of SHA-256(parent NUL callId),
 * the same id the Go worker gives a nested run, so a parent that starts the
 * same child again re-attaches to it.
 * @param {string} parent
 * @param {string} callId
 * @returns {string}
 */
export function childRunId(parent, callId) {
  const sum = createHash('sha256').update(`${parent}\x00${callId}`, 'utf8').digest().subarray(0, 20);
  let out = 'tc-';
  let bits = 0;
  let value = 0;
  for (const byte of sum) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += HEX32[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return out; // 160 bits: exactly 32 characters, no padding
}

const ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Throws a TypeError unless id is a valid run id, agent type or signal name
 * (1 to 64 characters of [A-Za-z0-9_-]).
 * @param {string} what
 * @param {unknown} id
 */
export function checkToken(what, id) {
  if (typeof id !== 'string' || !ID.test(id)) {
    throw new TypeError(`${what} must be 1 to 64 characters of [A-Za-z0-9_-], got ${JSON.stringify(id)}`);
  }
}
