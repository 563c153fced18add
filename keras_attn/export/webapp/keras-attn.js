// keras-attn in the browser: the model of a `keras-attn export RUN --format web` folder,
// translated on the device with LiteRT.js (Google's TFLite runtime in WebAssembly). Once
// loaded, nothing more is fetched: it translates with the network gone.
//
//   import {load} from './keras-attn.js';
//   const translator = await load();            // this folder's model
//   await translator.translate(['Hello!']);     // -> ['Bonjour !']
//
// The third runtime of the export's rules, beside keras_attn's Python and the SavedModel's
// graph: the sentence split and the spans passed through read rules.json
// (keras_attn.text.rules; rules.js), the tokenizers are keras_attn.text's (tokenizers.js),
// and the loop is keras_attn.export.builtin_runtime's greedy loop over the same encoder and
// decoder step files; the repetition controls are inside the step. It decodes as the
// export's serving_default does by default.

import {Tensor, loadAndCompile, loadLiteRt, supportsFeature} from './litert/litert.js';
import {Rules} from './rules.js';
import {END_ID, loadTokenizer} from './tokenizers.js';

export const CHAR_LIMIT = 10000; // characters per text (load's charLimit)
const STEP = 'decode_step_v3';
const CACHE_SIZE = 2000; // sentences whose translation is kept (as-you-type retypes them)

/** An error whose message a page can show as it is. */
export class TranslationError extends Error {}

async function fetchBytes(url, what) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new TranslationError(`could not fetch ${what} (${url}): ${e.message}`);
  }
  if (!response.ok) {
    throw new TranslationError(`could not fetch ${what} (${url}): HTTP ${response.status}`);
  }
  return new Uint8Array(await response.arrayBuffer());
}

async function fetchJson(url, what) {
  const bytes = await fetchBytes(url, what);
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (e) {
    throw new TranslationError(`${what} (${url}) is not valid JSON: ${e.message}`);
  }
}

let liteRt = null; // one WebAssembly runtime per page

async function startLiteRt(base, variants) {
  if (!liteRt) {
    liteRt = (async () => {
      // The plain build needs WebAssembly relaxed SIMD; the compat build runs without it.
      const relaxed = await supportsFeature('relaxedSimd');
      const variant = relaxed && variants.includes('plain') ? 'plain'
        : variants.includes('compat') ? 'compat' : null;
      if (!variant) {
        throw new TranslationError('this browser lacks WebAssembly relaxed SIMD, which the '
          + 'LiteRT.js build in this folder needs (export it again with --wasm all)');
      }
      const file = variant === 'plain' ? 'litert_wasm_internal.js' : 'litert_wasm_compat_internal.js';
      return loadLiteRt(new URL(file, base).href);
    })();
  }
  try {
    return await liteRt;
  } catch (e) {
    liteRt = null;
    throw e instanceof TranslationError ? e
      : new TranslationError(`LiteRT.js (WebAssembly) failed to start: ${e.message}`);
  }
}

async function compile(url, what) {
  const bytes = await fetchBytes(url, what);
  try {
    return await loadAndCompile(bytes, {accelerator: 'wasm'});
  } catch (e) {
    throw new TranslationError(`${what} (${url}) is not a model LiteRT.js can run: ${e.message}`);
  }
}

/**
 * Load the model of a web export folder.
 * @param {string|URL} base the folder (default: the one holding this module).
 * @param {{charLimit?: number}} settings charLimit: the most characters a text may hold.
 * @return {Promise<Translator>}
 */
export async function load(base = new URL('./', import.meta.url), settings = {}) {
  const folder = new URL(base, window.location.href);
  const model = new URL('model/', folder);
  const meta = await fetchJson(new URL('metadata.json', model), 'the model\'s metadata');
  if (!meta.web || meta.decoder_step.signature !== STEP) {
    throw new TranslationError('model/metadata.json is not a web export\'s (keras-attn export RUN --format web)');
  }
  const rules = new Rules(await fetchJson(new URL('rules.json', model), 'the text rules'));
  const tokenizers = {};
  for (const side of ['src', 'tgt']) {
    const {kind, file} = meta.web.tokenizers[side];
    const bytes = await fetchBytes(new URL(file, model), `the ${side} tokenizer`);
    try {
      tokenizers[side] = loadTokenizer(kind, kind === 'characters' ? {vocab: bytes} : {model: bytes});
    } catch (e) {
      throw new TranslationError(`the ${side} tokenizer (model/${file}) cannot be read: ${e.message}`);
    }
  }
  await startLiteRt(new URL('litert/', folder), meta.web.wasm);
  const encoder = await compile(new URL(meta.encoder.file, model), 'the encoder');
  const step = await compile(new URL(meta.decoder_step.file, model), 'the decoder step');
  return new Translator(meta, rules, tokenizers, encoder, step, settings);
}

/** keras_attn.export.builtin_runtime.length_limit: ceil of a float32 product. */
function lengthLimit(ids, factor, maxLength) {
  if (!(factor > 0)) return maxLength;
  const tokens = ids.filter((i) => i !== 0).length;
  const limit = Math.ceil(Math.fround(Math.fround(factor) * Math.fround(tokens)));
  return Math.min(Math.max(limit, 1), maxLength);
}

/** Pharaoh pairs from attention rows (keras_attn.text.word_alignment.pharaoh). */
function pharaoh(srcWords, tgtWords, attention) {
  const pairs = new Map();
  attention.slice(0, tgtWords.length).forEach((row, t) => {
    let best = -1;
    let bestScore = -Infinity;
    row.forEach((a, s) => {
      const score = s < srcWords.length && srcWords[s] >= 0 ? a : -1;
      if (score > bestScore) { bestScore = score; best = s; }
    });
    if (tgtWords[t] >= 0 && best >= 0 && best < srcWords.length && srcWords[best] >= 0) {
      pairs.set(`${srcWords[best]}-${tgtWords[t]}`, [srcWords[best], tgtWords[t]]);
    }
  });
  return [...pairs.values()].sort((p, q) => p[1] - q[1] || p[0] - q[0])
    .map(([i, j]) => `${i}-${j}`).join(' ');
}

/** The translator of one loaded model: ``translate(texts, options)``. */
export class Translator {
  constructor(meta, rules, tokenizers, encoder, step, settings = {}) {
    this.metadata = meta;
    this.rules = rules;
    this.src = tokenizers.src;
    this.tgt = tokenizers.tgt;
    this.encoder = encoder;
    this.step = step;
    this.width = meta.max_len;
    this.charLimit = settings.charLimit ?? CHAR_LIMIT;
    this.languages = meta.languages || null;
    const inputs = step.signatures[STEP].getInputDetails();
    this.stepInputs = new Map(inputs.map((d) => [d.name, d]));
    this.fedBack = inputs.map((d) => d.name).filter(
      (n) => n.startsWith('cache_') || ['lowest', 'unsure', 'history'].includes(n));
    this.cache = new Map();
    this.queue = Promise.resolve(); // one decoding at a time: the runtime is single-threaded
  }

  /** DecodingOptions (keras_attn.decoding.options) resolved for this model, or an error. */
  options(options = {}) {
    const web = this.metadata.web;
    const known = new Set([...Object.keys(web.options), 'passthrough']);
    for (const name of Object.keys(options)) {
      if (!known.has(name)) {
        throw new TranslationError(`unknown option ${JSON.stringify(name)}; the options are ${[...known].join(', ')}`);
      }
    }
    for (const [name, value] of Object.entries(web.fixed_options)) {
      if (name in options && options[name] !== value) {
        throw new TranslationError(`${name} must be ${JSON.stringify(value)} in the browser: the step is greedy, one hypothesis (received ${JSON.stringify(options[name])})`);
      }
    }
    for (const name of ['repetition_penalty', 'no_repeat_ngram_size']) {
      const value = options[name];
      if (value !== undefined && value !== null && value !== this.metadata.controls[name]) {
        throw new TranslationError(`${name} is fixed inside the model at ${this.metadata.controls[name]} (received ${value})`);
      }
    }
    const maxLength = options.max_length ?? null;
    if (maxLength !== null && !(Number.isInteger(maxLength) && maxLength >= 1)) {
      throw new TranslationError(`max_length must be an integer >= 1 (received ${JSON.stringify(maxLength)})`);
    }
    const factor = options.max_length_factor ?? this.metadata.controls.max_length_factor;
    if (typeof factor !== 'number' || !(factor >= 0)) {
      throw new TranslationError(`max_length_factor must be a number >= 0 (received ${JSON.stringify(factor)})`);
    }
    const passthrough = options.passthrough ?? this.metadata.passthrough;
    if (typeof passthrough !== 'boolean') {
      throw new TranslationError(`passthrough must be true or false (received ${JSON.stringify(passthrough)})`);
    }
    return {maxLength: Math.min(maxLength ?? this.width, this.width), factor, passthrough,
            alignments: Boolean(options.return_alignments)};
  }

  /** One translation per text (each any number of sentences). */
  async translate(texts, options = {}) {
    return (await this.translateWithDetails(texts, options)).map((d) => d.translation);
  }

  /** Per text ``{translation, score, confidence, truncated, alignment?}``, as the export's
   * documents join their sentences (keras_attn.translation.pipeline.join_documents). */
  async translateWithDetails(texts, options = {}) {
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== 'string')) {
      throw new TranslationError('translate() takes an array of strings');
    }
    const opts = this.options(options);
    texts.forEach((t, i) => {
      if (t.length > this.charLimit) {
        throw new TranslationError(`text ${i + 1} has ${t.length.toLocaleString('en')} characters; at most ${this.charLimit.toLocaleString('en')} are translated at a time`);
      }
    });
    const out = [];
    for (const text of texts) {
      const {sentences, separators} = this.rules.split(text);
      const parts = [];
      for (const sentence of sentences) parts.push(await this.sentence(sentence, opts));
      const doc = {translation: this.rules.join(parts.map((p) => p.translation), separators),
                   score: parts.reduce((s, p) => s + p.score, 0),
                   confidence: Math.min(1, ...parts.map((p) => p.confidence)),
                   truncated: parts.some((p) => p.truncated)};
      if (opts.alignments && parts.length) doc.alignment = parts.map((p) => p.alignment).join(' | ');
      out.push(doc);
    }
    return out;
  }

  /** One sentence, its spans passed through (keras_attn.translation.passthrough). */
  async sentence(sentence, opts) {
    if (!opts.passthrough) return this.decoded(sentence, opts);
    const c = this.rules.cut(sentence);
    if (c.onlySpans || this.rules.blank.test(c.rest)) {
      return {translation: c.source, score: 0, confidence: 1, truncated: false,
              alignment: this.rules.identity(Array.from(c.source))};
    }
    const hyp = await this.decoded(c.rest, opts);
    const [translation, alignment] = this.rules.putBack(c, hyp.translation, hyp.alignment);
    return {...hyp, translation, alignment: alignment ?? ''};
  }

  /** The model's translation of one sentence (kept: a page retypes the same ones). */
  decoded(text, opts) {
    const key = `${opts.maxLength} ${opts.factor} ${text}`;
    if (!this.cache.has(key)) {
      const result = this.queue.then(() => this.decode(text, opts));
      this.queue = result.catch(() => null);
      this.cache.set(key, result);
      result.catch(() => this.cache.delete(key));
      if (this.cache.size > CACHE_SIZE) this.cache.delete(this.cache.keys().next().value);
    }
    return this.cache.get(key);
  }

  async decode(text, opts) {
    let ids = this.src.encode(text);
    const truncated = ids.length > this.width - 1;
    ids = [...ids.slice(0, this.width - 1), END_ID];
    const limit = lengthLimit(ids, opts.factor, opts.maxLength);
    const {tokens, score, confidence, attention} = await this.loop(ids, opts.maxLength, limit);
    return {translation: this.tgt.decode(tokens), score, confidence, truncated,
            alignment: pharaoh(this.src.wordIds(ids), this.tgt.wordIds(tokens), attention)};
  }

  /** keras_attn.export.builtin_runtime's loop: encode, then the step until finished. */
  async loop(ids, maxLength, limit) {
    const meta = this.metadata;
    const source = new Int32Array(this.width);
    source.set(ids.slice(0, this.width));
    const owned = [];
    const tensor = (data, shape) => { const t = new Tensor(data, shape); owned.push(t); return t; };
    const encoded = await this.encoder.run('encode', {source: tensor(source, [1, this.width])});
    Object.values(encoded).forEach((t) => owned.push(t));
    const consts = {};
    for (const [name, t] of Object.entries(encoded)) {
      if (this.stepInputs.has(name) && !this.fedBack.includes(name)) consts[name] = t;
    }
    consts.length_limit = tensor(new Int32Array([limit]), [1]);
    let state = {};
    for (const name of this.fedBack) {
      const d = this.stepInputs.get(name);
      const size = d.shape.reduce((a, b) => a * b, 1);
      state[name] = tensor(d.dtype === 'int32' ? new Int32Array(size) : new Float32Array(size),
                           Array.from(d.shape));
    }
    let token = meta.start_id;
    let score = new Float32Array([0]);
    const tokens = [];
    const attention = [];
    let confidence = 0;
    try {
      for (let i = 0; i < maxLength; i++) {
        const out = await this.step.run(STEP, {
          ...consts, ...state, token: tensor(new Int32Array([token]), [1, 1]),
          index: tensor(new Int32Array([i]), []), score: tensor(score, [1])});
        Object.values(out).forEach((t) => owned.push(t));
        const previous = state;
        state = Object.fromEntries(this.fedBack.map((n) => [n, out[n]]));
        for (const t of Object.values(previous)) t.delete(); // the caches it replaced
        token = out.next_token.toTypedArray()[0];
        score = new Float32Array(out.score.toTypedArray());
        confidence = out.confidence.toTypedArray()[0];
        attention.push(Array.from(out.attention.toTypedArray()));
        tokens.push(token);
        const finished = out.finished.toTypedArray()[0];
        // Free what this step made that the next does not read.
        for (const [name, t] of Object.entries(out)) if (!this.fedBack.includes(name)) t.delete();
        if (finished) break;
      }
    } finally {
      for (const t of owned) if (!t.deleted) t.delete();
    }
    return {tokens, score: score[0], confidence, attention};
  }
}
