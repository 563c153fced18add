// The sentence split and the spans' cut and put-back of keras_attn.text.documents and
// keras_attn.text.spans, read from the same rules (rules.json, keras_attn.text.rules) and
// held equal to them by the fixture files the Python and TensorFlow runtimes' tests load
// too (tests/fixtures/spans_fixtures.json). Pure JavaScript: runs in a browser and in node.
//
// Positions are code points, as Python's str indexes them: each string is read as an
// array of code points (Array.from) and regex matches are mapped onto it.

/** A Python ``re.sub`` replacement ("\\1") as a String.replace one ("$1"). */
function jsReplacement(replacement) {
  return replacement.replace(/\$/g, '$$$$').replace(/\\(\d)/g, '$$$1');
}

/** Code point index of each UTF-16 offset of ``text`` (and one past the end). */
function codePointIndex(text) {
  const index = new Int32Array(text.length + 1);
  let k = 0;
  for (let i = 0; i < text.length; i++) {
    index[i] = k;
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < text.length) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) index[++i] = k;
    }
    k++;
  }
  index[text.length] = k;
  return index;
}

const ALNUM = /^[\p{L}\p{N}]$/u;
const PUNCTUATION = /^[\p{P}\p{S}]+$/u;

/** The rules of one rules.json document, compiled: ``split``, ``cut``, ``putBack``. */
export class Rules {
  constructor(data) {
    if (!data || !data.documents || !data.spans) {
      throw new Error('rules.json must hold "documents" and "spans" (keras_attn.text.rules)');
    }
    const docs = data.documents;
    const compile = (rules) => rules.map(([name, pattern, replacement]) => {
      try {
        return [new RegExp(pattern, 'gu'), jsReplacement(replacement)];
      } catch (e) {
        throw new Error(`the sentence rule ${JSON.stringify(name)} is no JavaScript regex: ${e.message}`);
      }
    });
    this.begin = docs.begin;
    this.end = docs.end;
    this.boundary = docs.boundary;
    this.escapeRules = compile(docs.escape);
    this.sentenceRules = compile(docs.rules);
    this.restoreRules = compile(docs.restore);
    const sp = data.spans;
    this.kinds = sp.rules.map(([name]) => name);
    this.wordBound = new Set(sp.word_bound);
    this.spanPattern = new RegExp(sp.rules.map(([, p], k) => `(?<r${k}>${p})`).join('|'), 'gu');
    this.space = new RegExp(`^[${sp.space}]$`, 'u');
    this.blank = new RegExp(`^[${sp.space}]*$`, 'u');
    this.wordSpace = sp.word_space;
    this.finalStop = new RegExp(sp.final_stop, 'u');
    this.thinSpace = sp.thin_space;
  }

  // --- documents ---------------------------------------------------------------------------
  /** ``keras_attn.text.documents.split``: ``{sentences, separators}``. */
  split(text) {
    if (typeof text !== 'string') throw new Error(`a text must be a string, not ${typeof text}`);
    const apply = (rules, t) => rules.reduce((s, [re, r]) => s.replace(re, r), t);
    const marked = apply(this.sentenceRules, this.begin + apply(this.escapeRules, text) + this.end);
    const pieces = marked.split(this.boundary).map((p) => apply(this.restoreRules, p));
    return {sentences: pieces.filter((_, i) => i % 2 === 1),
            separators: pieces.filter((_, i) => i % 2 === 0)};
  }

  /** ``keras_attn.text.documents.join``. */
  join(sentences, separators) {
    if (separators.length !== sentences.length + 1) {
      throw new Error(`separators must hold one more item than sentences (${sentences.length})`);
    }
    return separators[0] + sentences.map((s, i) => s + separators[i + 1]).join('');
  }

  // --- spans ---------------------------------------------------------------------------------
  isSpace(c) { return c !== undefined && this.space.test(c); }

  strip(chars, from, to) {
    while (from < to && this.isSpace(chars[from])) from++;
    while (to > from && this.isSpace(chars[to - 1])) to--;
    return [from, to];
  }

  /** ``keras_attn.text.spans.find``: ``[{kind, start, end, text}]`` (code points). */
  find(text) {
    const index = codePointIndex(text);
    const chars = Array.from(text);
    const found = [];
    this.spanPattern.lastIndex = 0;
    for (const m of text.matchAll(this.spanPattern)) {
      const k = Object.keys(m.groups).find((g) => m.groups[g] !== undefined);
      const kind = this.kinds[Number(k.slice(1))];
      const a = index[m.index];
      const b = index[m.index + m[0].length];
      if (this.wordBound.has(kind) && (
        (a > 0 && (ALNUM.test(chars[a - 1]) || '_-'.includes(chars[a - 1])))
        || (b < chars.length && (ALNUM.test(chars[b]) || chars[b] === '_')))) {
        continue; // inside a word: the model's
      }
      found.push({kind, start: a, end: b, text: m[0]});
    }
    return found;
  }

  /** Whether any span passes through in ``text`` (``passthrough.has_spans``). */
  hasSpans(text) {
    this.spanPattern.lastIndex = 0;
    return this.spanPattern.test(text);
  }

  words(chars) {
    const out = [];
    let start = -1;
    for (let k = 0; k <= chars.length; k++) {
      const space = k === chars.length || this.wordSpace.includes(chars[k]);
      if (!space && start < 0) start = k;
      if (space && start >= 0) { out.push([start, k]); start = -1; }
    }
    return out;
  }

  /** ``keras_attn.text.spans.cut``: ``{source, rest, groups, spans, restMap, onlySpans}``. */
  cut(sentence) {
    const chars = Array.from(sentence);
    const n = chars.length;
    const spans = this.find(sentence);
    if (!spans.length) {
      return {source: sentence, rest: sentence, groups: [], spans: [],
              restMap: chars.map((_, k) => k), onlySpans: false};
    }
    const bounds = [];
    for (const span of spans) {
      const last = bounds[bounds.length - 1];
      if (last && this.blank.test(chars.slice(last[1], span.start).join(''))) last[1] = span.end;
      else bounds.push([span.start, span.end]);
    }
    const keep = new Array(n).fill(true);
    const marks = [];
    for (const [start, end] of bounds) {
      const leftSpace = start === 0 || this.isSpace(chars[start - 1]);
      const rightSpace = end === n || this.isSpace(chars[end]);
      let tailEnd = end;
      while (tailEnd < n && !this.isSpace(chars[tailEnd])) tailEnd++;
      const tail = chars.slice(end, tailEnd).join('');
      const closing = !rightSpace && tail && PUNCTUATION.test(tail) ? tail : '';
      keep.fill(false, start, end);
      let lead = start;
      while (lead > 0 && this.isSpace(chars[lead - 1])) lead--;
      const before = chars.slice(lead, start).join('');
      let after = '';
      let mode;
      if (leftSpace && (rightSpace || closing)) {
        mode = 'after';
        if (lead > 0 && keep.slice(0, lead).some(Boolean)) {
          keep.fill(false, lead, start); // the whitespace before it goes with it
        } else { // at the start: the whitespace after it goes
          let stop = end;
          while (stop < n && this.isSpace(chars[stop])) stop++;
          after = chars.slice(end, stop).join('');
          keep.fill(false, end, stop);
        }
      } else if (leftSpace) {
        mode = 'before';
      } else {
        mode = 'glued';
      }
      marks.push({start, end, mode, closing, before, after});
    }
    let restMap = [];
    for (let k = 0; k < n; k++) if (keep[k]) restMap.push(k);
    let restChars = restMap.map((k) => chars[k]);
    const [lo, hi] = this.strip(restChars, 0, restChars.length);
    restChars = restChars.slice(lo, hi);
    restMap = restMap.slice(lo, hi);
    const words = this.words(restChars);
    const starts = words.map(([a]) => restMap[a]);
    const groups = marks.map(({start, end, mode, closing, before, after}) => {
      let anchor;
      const below = starts.filter((s) => s < start).length;
      if (mode === 'after') anchor = below - 1;
      else if (mode === 'before') {
        anchor = starts.findIndex((s) => s >= end);
        if (anchor < 0) anchor = words.length - 1;
      } else anchor = Math.max(below - 1, 0);
      if (!words.length) { mode = 'after'; anchor = -1; }
      const kinds = spans.filter((s) => start <= s.start && s.start < end).map((s) => s.kind);
      return {text: chars.slice(start, end).join(''), start, mode, anchor, before, after,
              closing, kinds};
    });
    const rest = restChars.join('');
    return {source: sentence, rest, groups, spans, restMap,
            onlySpans: groups.length > 0 && !restChars.some((c) => ALNUM.test(c))};
  }

  targetWord(group, pairs, nSource, nTarget) {
    const aligned = pairs.filter(([i, j]) => i === group.anchor && j < nTarget)
      .map(([, j]) => j).sort((x, y) => x - y);
    if (aligned.length) return group.mode === 'before' ? aligned[0] : aligned[aligned.length - 1];
    if (group.anchor >= nSource - 1 && group.mode !== 'before') return nTarget - 1;
    const before = group.mode === 'before';
    const share = (group.anchor + (before ? 0 : 1)) / Math.max(nSource, 1);
    const j = pyRound(share * nTarget) - (before ? 0 : 1);
    return Math.min(Math.max(j, 0), nTarget - 1);
  }

  /** ``keras_attn.text.spans.put_back``: ``[translation, alignment or null]``. */
  putBack(c, translation, alignment = null) {
    if (!c.groups.length) return [translation, alignment];
    const t = Array.from(translation);
    if (c.onlySpans || this.blank.test(translation)) {
      return [c.source, alignment !== null ? this.identity(Array.from(c.source)) : null];
    }
    const words = this.words(t);
    const nSource = this.words(Array.from(c.rest)).length;
    const pairs = parsePairs(alignment);
    const inserts = [];
    c.groups.forEach((group, order) => {
      if (group.anchor < 0) {
        inserts.push([0, order, group.text + (group.after || ' ')]);
        return;
      }
      const j = this.targetWord(group, pairs, nSource, words.length);
      const [a, b] = words[j];
      if (group.mode === 'before') {
        inserts.push([a, order, group.text]);
        return;
      }
      let at = b;
      const word = t.slice(a, b);
      const closing = Array.from(group.closing);
      const endsWithClosing = closing.length > 0 && word.length > closing.length
        && word.slice(word.length - closing.length).join('') === group.closing;
      if (group.closing && endsWithClosing) {
        at = b - closing.length;
      } else if (group.mode === 'after' && !group.closing) {
        const wordText = word.join('');
        const tail = this.finalStop.exec(wordText);
        const ends = group.anchor === nSource - 1 && group.kinds.length > 0
          && group.kinds.every((k) => k === 'emoji');
        if (tail && j === words.length - 1 && tail.index > 0 && !ends) {
          at = a + codePointIndex(wordText)[tail.index];
        }
      }
      while (at < b && at > a + 1 && this.thinSpace.includes(t[at - 1])) at--;
      inserts.push([at, order, group.mode === 'after' ? (group.before || ' ') + group.text : group.text]);
    });
    inserts.sort((x, y) => x[0] - y[0] || x[1] - y[1] || (x[2] < y[2] ? -1 : x[2] > y[2] ? 1 : 0));
    const moved = new Array(t.length + 1).fill(0);
    let final = '';
    let last = 0;
    const placed = [];
    for (const [at, order, text] of inserts) {
      const size = Array.from(text).length;
      placed.push([at + moved[at], order, text]);
      final += t.slice(last, at).join('') + text;
      last = at;
      for (let k = at; k <= t.length; k++) moved[k] += size;
    }
    final += t.slice(last).join('');
    if (alignment === null) return [final, null];
    return [final, this.renumbered(c, t, Array.from(final), pairs, placed, moved)];
  }

  identity(chars) {
    return this.words(chars).map((_, i) => `${i}-${i}`).join(' ');
  }

  renumbered(c, t, final, pairs, placed, moved) {
    const source = Array.from(c.source);
    const srcWords = this.words(source);
    const restWords = this.words(Array.from(c.rest));
    const baseWords = this.words(t);
    const finalWords = this.words(final);
    const out = new Map();
    const add = (i, j) => out.set(`${i}-${j}`, [i, j]);
    for (const [i, j] of pairs) {
      if (i < restWords.length && j < baseWords.length) {
        const si = wordAt(srcWords, c.restMap[restWords[i][0]]);
        const a = baseWords[j][0];
        add(si, wordAt(finalWords, a + moved[a]));
      }
    }
    for (let [begin, order, text] of placed) {
      const group = c.groups[order];
      const textChars = Array.from(text);
      const [lo, hi] = this.strip(textChars, 0, textChars.length);
      begin += lo;
      const stripped = textChars.slice(lo, hi);
      const groupChars = Array.from(group.text);
      const src = [...new Set(groupChars.map((ch, k) => (this.isSpace(ch) ? -1
        : wordAt(srcWords, group.start + k))).filter((w) => w >= 0))].sort((x, y) => x - y);
      const tgt = [...new Set(stripped.map((ch, k) => (this.isSpace(ch) ? -1
        : wordAt(finalWords, begin + k))).filter((w) => w >= 0))].sort((x, y) => x - y);
      if (src.length === tgt.length) src.forEach((i, k) => add(i, tgt[k]));
      else for (const i of src) for (const j of tgt) add(i, j);
    }
    return [...out.values()].sort((p, q) => p[1] - q[1] || p[0] - q[0])
      .map(([i, j]) => `${i}-${j}`).join(' ');
  }
}

/** Python's round(): halves to even. */
export function pyRound(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

function parsePairs(alignment) {
  return (alignment || '').split(/[ \t\n\r\f\v]+/).filter((p) => /^[0-9]+-[0-9]+$/.test(p))
    .map((p) => p.split('-').map(Number));
}

function wordAt(words, position) {
  for (let k = 0; k < words.length; k++) if (position < words[k][1]) return k;
  return words.length - 1;
}
