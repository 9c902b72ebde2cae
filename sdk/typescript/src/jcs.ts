// RFC 8785 (JCS) canonical JSON of a request body, as the receiver's
// fingerprint uses it (docs/receiver.md): the same bytes as the Go
// receiver's receiver.CanonicalBody and Python's drainer_client.receiver.
//
// A strict parser, because JSON.parse is lenient where the fingerprint must
// not be: a text with duplicate member names, a lone surrogate, a number out
// of double range, invalid UTF-8 or trailing data has no canonical form
// (canonicalJSON returns undefined and the fingerprint takes the bytes).
// Nor has a text with a number whose value differs from the value of the
// text JCS writes for its double (9007199254740993, 0.10000000000000001,
// 1e-400; not 0.1 or 1e23): JCS would make it one request with its
// neighbour, where drainer compares numbers as exact decimals.

type Value = null | boolean | number | string | Value[] | Map<string, Value>;

class NotCanonical extends Error {}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
const MAX_DEPTH = 1000;

class Parser {
  private i = 0;
  constructor(private readonly s: string) {}

  parseDocument(): Value {
    const v = this.value(0);
    this.ws();
    if (this.i !== this.s.length) throw new NotCanonical('trailing data');
    return v;
  }

  private ws(): void {
    const s = this.s;
    while (this.i < s.length) {
      const c = s.charCodeAt(this.i);
      if (c !== 0x20 && c !== 0x09 && c !== 0x0a && c !== 0x0d) break;
      this.i++;
    }
  }

  private value(depth: number): Value {
    if (depth > MAX_DEPTH) throw new NotCanonical('nested too deeply');
    this.ws();
    const s = this.s;
    const c = s[this.i];
    switch (c) {
      case '{': {
        this.i++;
        const m = new Map<string, Value>();
        this.ws();
        if (s[this.i] === '}') {
          this.i++;
          return m;
        }
        for (;;) {
          this.ws();
          if (s[this.i] !== '"') throw new NotCanonical('member name expected');
          const name = this.string();
          if (m.has(name)) throw new NotCanonical('duplicate member name');
          this.ws();
          if (s[this.i++] !== ':') throw new NotCanonical('":" expected');
          m.set(name, this.value(depth + 1));
          this.ws();
          const d = s[this.i++];
          if (d === '}') return m;
          if (d !== ',') throw new NotCanonical('"," or "}" expected');
        }
      }
      case '[': {
        this.i++;
        const a: Value[] = [];
        this.ws();
        if (s[this.i] === ']') {
          this.i++;
          return a;
        }
        for (;;) {
          a.push(this.value(depth + 1));
          this.ws();
          const d = s[this.i++];
          if (d === ']') return a;
          if (d !== ',') throw new NotCanonical('"," or "]" expected');
        }
      }
      case '"':
        return this.string();
      case 't':
        return this.literal('true', true);
      case 'f':
        return this.literal('false', false);
      case 'n':
        return this.literal('null', null);
      default: {
        NUMBER.lastIndex = this.i;
        const m = NUMBER.exec(s);
        if (!m) throw new NotCanonical('value expected');
        this.i += m[0].length;
        const n = Number(m[0]);
        if (!Number.isFinite(n)) throw new NotCanonical('number out of range');
        const exact = decimalValue(m[0]);
        if (exact === undefined || exact !== decimalValue(String(n))) throw new NotCanonical('number not exact as a double');
        return n;
      }
    }
  }

  private literal<T extends Value>(word: string, v: T): T {
    if (!this.s.startsWith(word, this.i)) throw new NotCanonical('value expected');
    this.i += word.length;
    return v;
  }

  private string(): string {
    const s = this.s;
    this.i++; // opening quote
    let out = '';
    let start = this.i;
    for (;;) {
      if (this.i >= s.length) throw new NotCanonical('unterminated string');
      const c = s.charCodeAt(this.i);
      if (c === 0x22) {
        out += s.slice(start, this.i);
        this.i++;
        break;
      }
      if (c < 0x20) throw new NotCanonical('control character in a string');
      if (c !== 0x5c) {
        this.i++;
        continue;
      }
      out += s.slice(start, this.i);
      const e = s[this.i + 1];
      this.i += 2;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const hex = s.slice(this.i, this.i + 4);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new NotCanonical('bad \\u escape');
          out += String.fromCharCode(parseInt(hex, 16));
          this.i += 4;
          break;
        }
        default:
          throw new NotCanonical('bad escape');
      }
      start = this.i;
    }
    if (LONE_SURROGATE.test(out)) throw new NotCanonical('lone surrogate');
    return out;
  }
}

// A nonzero number whose exponent has more digits than this (leading zeros
// aside) is out of double range or not exact.
const MAX_EXPONENT_DIGITS = 9;

/**
 * A form of a decimal number text that two texts share exactly when their
 * values are equal, as the Go receiver's decimalValue writes it: "0" for
 * zero (of either sign), else the sign, the significant digits without
 * leading or trailing zeros, "e" and the position of the decimal point
 * relative to the first of them. Undefined for a nonzero number whose
 * exponent has more than MAX_EXPONENT_DIGITS digits.
 */
function decimalValue(text: string): string | undefined {
  let sign = '';
  if (text.startsWith('-')) {
    sign = '-';
    text = text.slice(1);
  }
  const [mantissa = '', exp] = text.toLowerCase().split('e');
  const [whole = '', frac = ''] = mantissa.split('.');
  const digits = (whole + frac).replace(/^0+/, '');
  if (digits === '') return '0';
  let point = whole.length - (whole.length + frac.length - digits.length);
  if (exp !== undefined) {
    const expSign = exp.startsWith('-') ? -1 : 1;
    const e = exp.replace(/^[+-]/, '').replace(/^0+/, '');
    if (e.length > MAX_EXPONENT_DIGITS) return undefined;
    point += expSign * Number(e || '0');
  }
  return sign + digits.replace(/0+$/, '') + 'e' + point;
}

function write(v: Value, out: string[]): void {
  if (v === null) out.push('null');
  else if (typeof v === 'boolean') out.push(v ? 'true' : 'false');
  else if (typeof v === 'number') out.push(JSON.stringify(v)); // ECMAScript Number::toString; -0 is "0"
  else if (typeof v === 'string') out.push(JSON.stringify(v)); // JCS escaping (no lone surrogates here)
  else if (Array.isArray(v)) {
    out.push('[');
    v.forEach((item, i) => {
      if (i) out.push(',');
      write(item, out);
    });
    out.push(']');
  } else {
    out.push('{');
    // Default sort compares UTF-16 code units, as JCS requires.
    [...v.keys()].sort().forEach((name, i) => {
      if (i) out.push(',');
      out.push(JSON.stringify(name), ':');
      write(v.get(name) as Value, out);
    });
    out.push('}');
  }
}

const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The JCS canonical form of a JSON text, or undefined if it has none. */
export function canonicalJSON(body: Uint8Array): Buffer | undefined {
  let text: string;
  try {
    text = decoder.decode(body);
  } catch {
    return undefined;
  }
  try {
    const out: string[] = [];
    write(new Parser(text).parseDocument(), out);
    return Buffer.from(out.join(''), 'utf8');
  } catch (err) {
    if (err instanceof NotCanonical || err instanceof RangeError) return undefined;
    throw err;
  }
}
