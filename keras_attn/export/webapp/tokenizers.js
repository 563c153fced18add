// The tokenizers of keras_attn.text in JavaScript, held equal to the Python ones
// (keras_attn.text.python_tokenizers, the sentencepiece library) and to the SavedModel's
// graph by tests on the same inputs (tests/export/test_web_js.py):
//
// * CharTokenizer: a character vocabulary (*_vocab.txt, the dates model);
// * SentencePieceTokenizer: a unigram SentencePiece model (*.model): its normalizer (the
//   model's precompiled character map, a double-array trie) and Viterbi segmentation, read
//   from the model file itself.
//
// Each has encode(text) -> ids (no [END]), decode(ids) -> text and wordIds(ids) -> the
// word of each token (-1: none), as keras_attn.translation.alignment numbers them.

export const PAD_ID = 0;
export const UNK_ID = 1;
export const START_ID = 2;
export const END_ID = 3;
const RESERVED = 4;
const UNK = '[UNK]';
const SUFFIX = '##';
const SPACE_PIECE = '\u2581';

/** ids up to the first [END] as [id, previous id] pairs, no PAD/START, unknown ids [UNK]. */
function kept(ids, vocabSize) {
  const out = [];
  let previous = null;
  for (let i of ids) {
    i = i >= 0 && i < vocabSize ? i : UNK_ID;
    if (i === END_ID) break;
    if (i !== PAD_ID && i !== START_ID) out.push([i, previous]);
    previous = i;
  }
  return out;
}

/** FastWordpiece's join: a "##" piece glued to the word before, words joined by a space. */
function joinWords(pieces) {
  const words = [];
  for (const piece of pieces) {
    if (piece.startsWith(SUFFIX) && words.length) words[words.length - 1] += piece.slice(2);
    else words.push(piece);
  }
  return words.join(' ');
}

/** keras_attn.translation.alignment.word_positions of one row, from per-token flags. */
function wordPositions(ids, flags) {
  const words = [];
  let word = -1;
  let gap = true;
  for (const raw of ids) {
    const i = Math.min(Math.max(raw, 0), flags.length - 1);
    const {starts, space, reserved} = flags[i];
    if (reserved || space) { words.push(-1); gap = true; continue; }
    if (starts || gap) word++;
    words.push(word);
    gap = false;
  }
  return words;
}

function reservedFlags(i) {
  return {starts: i === UNK_ID, space: false,
          reserved: i === PAD_ID || i === START_ID || i === END_ID};
}

const ISSPACE = /^[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/u;

/** A character vocabulary: reserved tokens, every character c, then ##c. */
export class CharTokenizer {
  constructor(vocab) {
    this.vocab = vocab;
    this.ids = new Map();
    vocab.forEach((t, i) => {
      if (t.startsWith(SUFFIX) && t.length > SUFFIX.length) this.ids.set(t.slice(2), i);
    });
    this.flags = vocab.map((t, i) => {
      if (i < RESERVED) return reservedFlags(i);
      const body = t.startsWith(SUFFIX) && t.length > 2 ? t.slice(2) : t;
      return {starts: false, space: ISSPACE.test(body), reserved: false};
    });
  }

  encode(text) {
    const ids = Array.from(text).map((c) => this.ids.get(c));
    return ids.includes(undefined) ? [UNK_ID] : ids;
  }

  decode(ids) {
    const pieces = kept(ids, this.vocab.length).map(([i], n) => {
      let token = this.vocab[i];
      if (i >= RESERVED) {
        token = token.startsWith(SUFFIX) ? token.slice(2) : token;
        token = n ? SUFFIX + token : token;
      }
      return token;
    });
    return joinWords(pieces);
  }

  wordIds(ids) { return wordPositions(ids, this.flags); }
}

// --- SentencePiece ------------------------------------------------------------------------
/** The fields of a protobuf message: {number: [values]} (varint as Number, bytes as views). */
function protoFields(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const fields = {};
  let pos = 0;
  const varint = () => {
    let result = 0;
    let shift = 0;
    for (;;) {
      if (pos >= bytes.length) throw new Error('the SentencePiece model is truncated');
      const b = bytes[pos++];
      result += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return result;
      shift += 7;
    }
  };
  while (pos < bytes.length) {
    const key = varint();
    const number = Math.floor(key / 8);
    const wire = key & 7;
    let value;
    if (wire === 0) value = varint();
    else if (wire === 1) { value = view.getFloat64(pos, true); pos += 8; }
    else if (wire === 2) {
      const size = varint();
      if (pos + size > bytes.length) throw new Error('the SentencePiece model is truncated');
      value = bytes.subarray(pos, pos + size);
      pos += size;
    } else if (wire === 5) { value = view.getFloat32(pos, true); pos += 4; }
    else throw new Error(`the SentencePiece model is corrupt (wire type ${wire})`);
    (fields[number] = fields[number] || []).push(value);
  }
  return fields;
}

const utf8 = new TextDecoder('utf-8');
const NORMAL = 1;
const UNKNOWN = 2;
const USER_DEFINED = 4;
const UNUSED = 5;

/** The precompiled character map: a double-array trie over UTF-8 bytes and its strings. */
class CharsMap {
  constructor(blob) {
    const view = new DataView(blob.buffer, blob.byteOffset, blob.byteLength);
    const trieSize = view.getUint32(0, true);
    if (trieSize + 4 > blob.length) throw new Error('the SentencePiece character map is corrupt');
    this.units = new Uint32Array(trieSize / 4);
    for (let k = 0; k < this.units.length; k++) this.units[k] = view.getUint32(4 + 4 * k, true);
    this.normalized = blob.subarray(4 + trieSize);
  }

  /** [replacement bytes, consumed] of the longest rule at bytes[pos:], or null. */
  longest(bytes, pos) {
    const u = this.units;
    const offset = (unit) => (unit >>> 10) << ((unit & (1 << 9)) >>> 6);
    let node = offset(u[0]);
    let best = null;
    for (let i = pos; i < bytes.length; i++) {
      node ^= bytes[i];
      const unit = u[node];
      if (unit === undefined || (unit & ((1 << 31) | 0xff)) >>> 0 !== bytes[i]) break;
      node ^= offset(unit);
      if ((unit >>> 8) & 1) best = [u[node] & 0x7fffffff, i + 1 - pos];
    }
    if (!best) return null;
    let end = best[0];
    while (this.normalized[end] !== 0 && end < this.normalized.length) end++;
    return [this.normalized.subarray(best[0], end), best[1]];
  }
}

function oneCharLength(bytes, pos) {
  const b = bytes[pos];
  const len = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
  return Math.min(len, bytes.length - pos);
}

/** A unigram SentencePiece model read from its file (keras_attn.text.subword). */
export class SentencePieceTokenizer {
  constructor(bytes) {
    const model = protoFields(bytes);
    this.vocab = [];
    this.types = [];
    this.scores = [];
    for (const piece of model[1] || []) {
      const f = protoFields(piece);
      this.vocab.push(utf8.decode((f[1] || [new Uint8Array()])[0]));
      this.scores.push(Math.fround((f[2] || [0])[0]));
      this.types.push((f[3] || [NORMAL])[0]);
    }
    const trainer = protoFields((model[2] || [new Uint8Array()])[0]);
    const modelType = (trainer[3] || [1])[0];
    if (modelType !== 1) {
      throw new Error(`only unigram SentencePiece models run in the browser (model_type ${modelType})`);
    }
    if ((trainer[35] || [0])[0] || (trainer[24] || [0])[0]) {
      throw new Error('byte_fallback and treat_whitespace_as_suffix models do not run in the browser');
    }
    const norm = protoFields((model[3] || [new Uint8Array()])[0]);
    const flag = (n) => (norm[n] ? norm[n][0] !== 0 : true);
    this.addDummyPrefix = flag(3);
    this.removeExtraWhitespaces = flag(4);
    this.escapeWhitespaces = flag(5);
    this.charsMap = norm[2] && norm[2][0].length ? new CharsMap(norm[2][0]) : null;
    this.pieces = new Map();
    this.maxPieceLength = 0;
    let minScore = Infinity;
    this.unkId = this.types.indexOf(UNKNOWN);
    this.vocab.forEach((p, i) => {
      const type = this.types[i];
      if (type === NORMAL) minScore = Math.min(minScore, this.scores[i]);
      if (type === NORMAL || type === USER_DEFINED || type === UNUSED) {
        this.pieces.set(p, i);
        this.maxPieceLength = Math.max(this.maxPieceLength, Array.from(p).length);
      }
    });
    this.maxScore = Math.max(...this.vocab.map((_, i) => (this.types[i] === NORMAL ? this.scores[i] : -Infinity)));
    this.unkScore = Math.fround(minScore - 10);
    this.spaceId = this.vocab.indexOf(SPACE_PIECE);
    this.flags = this.vocab.map((t, i) => (i < RESERVED ? reservedFlags(i) : {
      starts: t.startsWith(SPACE_PIECE) && t !== SPACE_PIECE, space: t === SPACE_PIECE,
      reserved: false}));
  }

  /** The model's normalisation of ``text``, a string (spaces as U+2581). */
  normalize(text) {
    const input = new TextEncoder().encode(text);
    const prefix = (pos) => {
      const rule = this.charsMap ? this.charsMap.longest(input, pos) : null;
      if (rule) return rule;
      const n = oneCharLength(input, pos);
      return [input.subarray(pos, pos + n), n];
    };
    let pos = 0;
    if (this.removeExtraWhitespaces) {
      while (pos < input.length) {
        const [sp, n] = prefix(pos);
        if (!(sp.length === 1 && sp[0] === 0x20)) break;
        pos += n;
      }
    }
    if (pos >= input.length) return '';
    const out = [];
    const space = this.escapeWhitespaces ? [0xe2, 0x96, 0x81] : [0x20];
    if (this.addDummyPrefix) out.push(...space);
    let prevSpace = this.removeExtraWhitespaces;
    while (pos < input.length) {
      const [sp, n] = prefix(pos);
      let k = 0;
      while (prevSpace && k < sp.length && sp[k] === 0x20) k++;
      if (k < sp.length) {
        for (; k < sp.length; k++) {
          if (sp[k] === 0x20) out.push(...space);
          else out.push(sp[k]);
        }
        prevSpace = sp[sp.length - 1] === 0x20;
      }
      pos += n;
      if (!this.removeExtraWhitespaces) prevSpace = false;
    }
    if (this.removeExtraWhitespaces) {
      while (out.length >= space.length
             && space.every((b, j) => out[out.length - space.length + j] === b)) {
        out.length -= space.length;
      }
    }
    return utf8.decode(new Uint8Array(out));
  }

  encode(text) {
    const chars = Array.from(this.normalize(text));
    const size = chars.length;
    // Best path ending at each position: [score, start, id] (start -1: none yet).
    const score = new Float64Array(size + 1);
    const start = new Int32Array(size + 1).fill(-1);
    const id = new Int32Array(size + 1);
    for (let from = 0; from < size; from++) {
      const here = score[from];
      let single = false;
      let piece = '';
      for (let to = from + 1; to <= Math.min(size, from + this.maxPieceLength); to++) {
        piece += chars[to - 1];
        const i = this.pieces.get(piece);
        if (i === undefined || this.types[i] === UNUSED) continue;
        const bytes = new TextEncoder().encode(piece).length;
        const s = this.types[i] === USER_DEFINED ? bytes * this.maxScore - 0.1 : this.scores[i];
        const candidate = Math.fround(s + here);
        if (start[to] === -1 || candidate > score[to]) {
          score[to] = candidate;
          start[to] = from;
          id[to] = i;
        }
        if (to === from + 1) single = true;
      }
      if (!single) {
        const candidate = Math.fround(this.unkScore + here);
        if (start[from + 1] === -1 || candidate > score[from + 1]) {
          score[from + 1] = candidate;
          start[from + 1] = from;
          id[from + 1] = this.unkId;
        }
      }
    }
    const ids = [];
    for (let end = size; end > 0; end = start[end]) ids.push(id[end]);
    ids.reverse();
    // Runs of unknown pieces are one unknown piece, as the library gives them.
    return ids.filter((i, k) => !(i === this.unkId && k > 0 && ids[k - 1] === this.unkId));
  }

  form(i, wordStart) {
    if (i < RESERVED) return UNK;
    const piece = this.vocab[i];
    if (piece.startsWith(SPACE_PIECE)) return piece.slice(1);
    return wordStart ? piece : SUFFIX + piece;
  }

  decode(ids) {
    const pieces = kept(ids, this.vocab.length).filter(([i]) => i !== this.spaceId)
      .map(([i, prev], n) => this.form(i, !n || prev === this.spaceId));
    return joinWords(pieces);
  }

  wordIds(ids) { return wordPositions(ids, this.flags); }
}

/** A tokenizer from its files: ``kind`` "characters" (files {"vocab": text bytes}) or
 * "sentencepiece" (files {"model": bytes}). */
export function loadTokenizer(kind, files) {
  if (kind === 'characters') {
    const text = utf8.decode(files.vocab);
    const lines = text.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    return new CharTokenizer(lines.map((t) => (t.endsWith('\r') ? t.slice(0, -1) : t)));
  }
  if (kind === 'sentencepiece') return new SentencePieceTokenizer(files.model);
  throw new Error(`no tokenizer of kind ${JSON.stringify(kind)} (characters, sentencepiece)`);
}
