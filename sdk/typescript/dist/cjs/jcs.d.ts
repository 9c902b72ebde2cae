/** The JCS canonical form of a JSON text, or undefined if it has none. */
export declare function canonicalJSON(body: Uint8Array): Buffer | undefined;
