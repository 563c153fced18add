"""The Markdown report of a results dict (``bench.json`` -> ``bench.md``)."""


def _kv(config):
    return ", ".join(f"{k} {v}" for k, v in config.items())


def markdown(results):
    m = results["machine"]
    lines = ["# keras_attn benchmarks", "",
             f"{results['created']} - {m['cpu']}, {m['cpu_count']} cores, TF {m['tensorflow']}, "
             f"Keras {m['keras']}; clock `{results['clock']}`, threads "
             f"{results['threads'] or 'default'}, load average at start {m.get('load_average')}"
             + (" (--quick: tiny sizes, not comparable)" if results["quick"] else ""), ""]
    if results.get("note"):
        lines += [f"Note: {results['note']}", ""]
    lines += [f"float32 matmul peak ({results['peak']['n']}x{results['peak']['n']}): "
              f"**{results['peak']['gflops']} GFLOP/s**", ""]
    s = results["sections"]
    if "mha" in s:
        lines += ["## Multi-head attention (ours / keras.layers.MultiHeadAttention)", "",
                  f"Config: {_kv(s['mha']['config'])}. Target: {s['mha']['target']} "
                  f"(met: {s['mha']['target_met']}).", "",
                  "| L | XLA | pass | ours ms | Keras ms | ratio | ours GFLOP/s (% peak) "
                  "| Keras GFLOP/s (% peak) | matmuls alone ms (/ Keras) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in s["mha"]["rows"]:
            floor = (f"{r['matmuls_only']['median_ms']:.2f} ({r['matmuls_only_ratio']:.3f})"
                     if "matmuls_only" in r else "")
            lines.append(f"| {r['L']} | {'yes' if r['jit'] else 'no'} | {r['mode']} | "
                         f"{r['ours']['median_ms']:.2f} | {r['keras']['median_ms']:.2f} | "
                         f"**{r['ratio']:.3f}** | {r['ours_gflops']:.0f} ({r['ours_pct_peak']}%) | "
                         f"{r['keras_gflops']:.0f} ({r['keras_pct_peak']}%) | {floor} |")
        lines.append("")
    if "train" in s:
        t = s["train"]
        lines += ["## Training step (ours / keras_hub)", "",
                  f"Config: {_kv(t['config'])}; {t['train_gflop_per_step']} GFLOP per step "
                  f"({t['flops']}). Target: {t['target']} (met: {t['target_met']}).", "",
                  "| policy | XLA | dropout | ours tokens/s (MFU) | keras_hub tokens/s (MFU) "
                  "| speedup |",
                  "|---|---|---|---|---|---|"]
        for r in t["rows"]:
            lines.append(f"| {r['policy']} | {'yes' if r['jit'] else 'no'} | "
                         f"{r.get('dropout', 0.1)}"
                         f"{' + FFN ' + str(r['ffn_dropout']) if r.get('ffn_dropout') else ''} | "
                         f"{r['ours_tokens_per_s']} ({r['ours_mfu_pct']}%) | "
                         f"{r['keras_hub_tokens_per_s']} ({r['keras_hub_mfu_pct']}%) | "
                         f"**{r['speedup']:.3f}** |")
        lines.append("")
    if "decode" in s:
        d = s["decode"]
        pos = list(d["step_ms_at_position"])
        lines += ["## Greedy decoding", "", f"Config: {_kv(d['config'])}. Targets: {d['targets']} "
                  f"(met: {d['target_met']}).", "",
                  "| decoder | ms/token | " + " | ".join(f"step ms at {p}" for p in pos) + " |",
                  "|---|---|" + "---|" * len(pos)]
        for k, v in d["ms_per_token"].items():
            steps = [d["step_ms_at_position"][p].get(k) for p in pos]
            lines.append(f"| {k} | {v:.3f} | " + " | ".join(
                "" if x is None else f"{x:.3f}" for x in steps) + " |")
        lines += ["", f"ours / keras_hub ms/token: **{d['ratio_ours_vs_keras_hub']}** "
                  f"(XLA: {d['ratio_ours_vs_keras_hub_xla']}); ours step at {pos[-1]} / at "
                  f"{pos[0]}: **{d['ours_step_ratio_last_vs_first']}** (keras_hub "
                  f"{d['keras_hub_step_ratio_last_vs_first']}); cached tokens equal naive: "
                  f"{d['identical_tokens_ours_cached_vs_naive']}", ""]
    if "serve" in s:
        lines += _serve_markdown(s["serve"])
    return "\n".join(lines)


def _serve_markdown(sv):
    lines = ["## Serving engines: greedy translation, same weights", ""]
    if not sv.get("available"):
        return lines + [f"Not available: {sv['reason']}", ""]
    lines += [f"Config: {_kv(sv['config'])}. Target tokens: {sv['target_tokens']}. "
              "Ratio: target tokens/s of this engine / CTranslate2's of the same precision "
              "(int8 files against CTranslate2 int8, the rest against float32), taken within "
              "each round; median (min-max) over rounds.", ""]
    for name, m in sv["models"].items():
        if not m.get("available", True):
            lines += [f"### {name}", "", f"Not available: {m['reason']}", ""]
            continue
        lines += [f"### {name}: {_kv(m['model'])}" + (f"; weights: {m['weights']}"
                                                      if m.get("weights") else ""), "",
                  f"Run `{m['run_dir']}`, {m['sentences']} sentences, {m['target_tokens']} "
                  f"target tokens, max_len {m['max_len']}, {m.get('rounds', 1)} rounds.", "",
                  "| engine | batch | ms/sentence | target tokens/s | spread over rounds % "
                  "| ratio to CTranslate2 | same text as SavedModel | same ids as translate_ids "
                  "| size MB |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for b, rows in m["batches"].items():
            for k, r in rows.items():
                a = m["agreement"][k]
                ids = a.get("ids_vs_translate_ids")
                base = "ctranslate2_int8" if k.endswith("int8") else "ctranslate2_float32"
                v = r[f"vs_{base}"]
                file = "saved_model" if k.startswith("saved_model") else k  # one for all
                lines.append(
                    f"| {k} | {b} | {r['ms_per_sentence']:.2f} | {r['tokens_per_s']:.0f} | "
                    f"{r['spread_pct']} | **{v['median']:.2f}x** ({v['min']:.2f}-"
                    f"{v['max']:.2f}) | {a['text_vs_serving_default']:.1%} | "
                    f"{'' if ids is None else format(ids, '.1%')} | "
                    f"{m['bytes'][file] / 1e6:.2f} |")
        for k, why in m.get("unavailable", {}).items():
            lines.append(f"| {k} | | not available: {why.splitlines()[0][:150]} | | | | | | |")
        lines.append("")
    return lines
