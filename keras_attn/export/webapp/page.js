// The translator page of a web export (index.html): two panes, translated as you type, in
// this browser. window.kerasAttn = {ready, translate(texts, options), translator} is what a
// test or another script on the page calls.
import {TranslationError, load} from './keras-attn.js';

const $ = (id) => document.getElementById(id);
const status = (text, error = false) => {
  $('status').textContent = text;
  $('status').className = error ? 'error' : '';
};

const ready = load(new URL('./', import.meta.url));
let translator = null;

async function translate(texts, options = {}) {
  const t = await ready;
  const {source, target, ...decoding} = options;
  const langs = t.languages;
  for (const [side, code] of [['source', source], ['target', target]]) {
    if (code === undefined || code === null || (side === 'source' && code === 'auto')) continue;
    if (!langs || langs[side].code !== code) {
      const pair = langs ? `${langs.source.name} (${langs.source.code}) to ${langs.target.name} (${langs.target.code})` : 'one pair';
      throw new TranslationError(`this model translates ${pair}; it has no ${side} language ${JSON.stringify(code)}`);
    }
  }
  return t.translate(texts, decoding);
}

window.kerasAttn = {ready: ready.then(() => true), translate, get translator() { return translator; }};

const params = new URLSearchParams(window.location.search);
let latest = 0;

async function update() {
  const text = $('source').value;
  const asked = ++latest;
  if (!text.trim()) {
    $('target').value = '';
    status(translator ? 'Ready.' : $('status').textContent, $('status').className === 'error');
    return;
  }
  try {
    const started = performance.now();
    const [out] = await translate([text], {source: params.get('source') ?? undefined,
                                           target: params.get('target') ?? undefined});
    if (asked !== latest) return; // a later keystroke's answer will come
    $('target').value = out;
    status(`Translated in this browser in ${Math.round(performance.now() - started)} ms.`);
  } catch (e) {
    if (asked !== latest) return;
    status(e instanceof TranslationError ? e.message : `Error: ${e.message}`, true);
  }
}

let timer = null;
$('source').addEventListener('input', () => {
  clearTimeout(timer);
  timer = setTimeout(update, 250);
});

ready.then((t) => {
  translator = t;
  const langs = t.languages;
  if (langs) {
    $('source-name').textContent = langs.source.name;
    $('target-name').textContent = langs.target.name;
    document.title = `${langs.source.name} → ${langs.target.name}`;
  }
  status('Ready: translating in this browser, nothing is sent anywhere.');
  if ($('source').value.trim()) update();
}, (e) => {
  status(`The model did not load: ${e.message}`, true);
});
