// The web runtime's pure-JavaScript parts on given inputs, for tests/export/test_web_js.py:
// node run_rules.mjs REQUEST.json prints what each part gives, as JSON.
// REQUEST: {"rules": rules.json's content, "split": [text], "cut": [sentence],
//           "put_back": [{"source", "translation", "alignment"}],
//           "tokenizer": {"kind", "files": {name: base64}, "encode": [text], "decode": [[id]]}}
import {readFileSync} from 'node:fs';
import {Rules} from '../../keras_attn/export/webapp/rules.js';
import {loadTokenizer} from '../../keras_attn/export/webapp/tokenizers.js';

const request = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const out = {};
if (request.rules) {
  const rules = new Rules(request.rules);
  out.split = (request.split || []).map((t) => rules.split(t));
  out.cut = (request.cut || []).map((s) => {
    const c = rules.cut(s);
    return {rest: c.rest, only_spans: c.onlySpans,
            groups: c.groups.map((g) => ({text: g.text, start: g.start, mode: g.mode,
                                          anchor: g.anchor, before: g.before, after: g.after,
                                          closing: g.closing, kinds: g.kinds}))};
  });
  out.put_back = (request.put_back || []).map(({source, translation, alignment}) =>
    rules.putBack(rules.cut(source), translation, alignment));
}
if (request.tokenizer) {
  const files = Object.fromEntries(Object.entries(request.tokenizer.files).map(
    ([name, b64]) => [name, new Uint8Array(Buffer.from(b64, 'base64'))]));
  const tok = loadTokenizer(request.tokenizer.kind, files);
  out.encode = (request.tokenizer.encode || []).map((t) => tok.encode(t));
  out.decode = (request.tokenizer.decode || []).map((ids) => tok.decode(ids));
  out.words = (request.tokenizer.words || []).map((ids) => tok.wordIds(ids));
}
process.stdout.write(JSON.stringify(out));
