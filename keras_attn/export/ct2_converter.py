"""Our Transformer as a CTranslate2 ``TransformerSpec`` (TensorFlow/CTranslate2-only).

:class:`KerasAttnConverter`, a ``ctranslate2.converters.Converter``, only fills the spec from
the Keras weights (the model knows nothing of the engine); :func:`check_supported` refuses,
naming the option, what one ``TransformerSpec`` cannot hold. The mapping:

* kernels ``(in, out)`` transposed; self-attention Q/K/V fused, cross-attention K/V fused;
  biases where the model has them;
* LayerNorms ``addnorm{1,2,3}`` -> ``self_attention``, ``attention``, ``ffn.layer_norm``
  (pre-norm: ``final_norm`` -> ``encoder/decoder.layer_norm`` too), the model's epsilon;
* our positional table as ``position_encodings.encodings`` (CTranslate2's own differs);
* ``tie_embeddings``: the projection's weight is the target embedding (stored once);
* reserved tokens renamed (:data:`SPECIAL_TOKENS`), ``add_source_eos`` as
  ``Translator.encode`` appends ``[END]``;
* the projection's bias for ``[PAD]`` and ``[START]`` lowered by :data:`BANNED_BIAS`, so
  that any client, as ours, never emits them.

Reference: CTranslate2's ``converters/opennmt_py.py`` (the same mapping for OpenNMT-py).
"""
import numpy as np

try:
    from ctranslate2.converters import Converter
    from ctranslate2.converters import utils as ct2_utils
    from ctranslate2.specs import common_spec, transformer_spec
except ImportError as e:  # an optional extra
    raise ImportError("keras_attn.export.ctranslate2 needs CTranslate2: "
                      "pip install -e '.[ctranslate2]'") from e

from keras_attn.text import tokenizers as text
# The vocabularies' renaming lives with the runtime, which reads them without TensorFlow.
from keras_attn.export.ctranslate2_runtime import SPECIAL_TOKENS, ct2_vocab  # noqa: F401

# Added to the [PAD] and [START] logits: exp(-3e4 + logit) is 0 in float32, and -3e4 is
# finite in float16 (Keras's float16 mask fill), should the model run in float16.
BANNED_BIAS = -3e4


# --- what CTranslate2 can represent ------------------------------------------------------
def check_supported(model):
    """Raise ``ValueError`` naming the option if ``TransformerSpec`` cannot hold ``model``.

    Returns the options the spec is built from: ``num_layers`` (encoder, decoder),
    ``num_heads``, ``pre_norm``, ``epsilon``, ``use_bias`` (encoder, decoder),
    ``tie_embeddings``.
    """
    import keras

    from keras_attn.models import model_kind

    kind = model_kind(model)
    if kind != "transformer":
        raise ValueError("CTranslate2's TransformerSpec holds a Transformer only (no GRU, no "
                         f"additive attention). Received: model={kind!r}")
    encoder, decoder = model.get_layer("encoder"), model.get_layer("decoder")
    for name in ("num_heads", "norm_first", "num_hiddens"):
        a, b = getattr(encoder, name), getattr(decoder, name)
        if a != b:
            raise ValueError(f"CTranslate2's TransformerSpec has one `{name}` for the encoder "
                             f"and the decoder. Received: encoder {name}={a!r}, decoder "
                             f"{name}={b!r}")
    norms = [ln for stack in (encoder, decoder) for ln in _layer_norms(stack)]
    epsilons = sorted({float(ln.epsilon) for ln in norms})
    if len(epsilons) != 1:
        raise ValueError("CTranslate2 reads one LayerNorm `epsilon` (config.json "
                         f"layer_norm_epsilon). Received: epsilon values {epsilons}")
    for ln in norms:
        if not (ln.center and ln.scale) or ln.rms_scaling:
            raise ValueError("CTranslate2's LayerNorm has a gamma and a beta. Received: "
                             f"{ln.path} with center={ln.center}, scale={ln.scale}")
    for stack in (encoder, decoder):
        for blk in stack.blks:
            activation = blk.ffn.activation
            if activation not in ("relu", keras.activations.relu):
                raise ValueError("The CTranslate2 export maps a ReLU FFN (what our blocks "
                                 f"build). Received: activation={activation!r} in {blk.path}")
    return {"num_layers": (encoder.num_layers, decoder.num_layers),
            "num_heads": encoder.num_heads, "pre_norm": encoder.norm_first,
            "epsilon": epsilons[0], "use_bias": (encoder.use_bias, decoder.use_bias),
            "tie_embeddings": decoder.tie_embeddings}


def _layer_norms(stack):
    found = [an.ln for blk in stack.blks
             for an in (blk.addnorm1, blk.addnorm2, getattr(blk, "addnorm3", None)) if an]
    return found + ([stack.final_norm] if stack.final_norm is not None else [])


# --- the converter -----------------------------------------------------------------------
def _np(variable):
    return np.ascontiguousarray(np.asarray(variable, dtype=np.float32))


def _linear(spec, dense):
    """A Keras ``Dense`` (kernel ``(in, out)``) into a ``LinearSpec`` (weight ``[out, in]``)."""
    spec.weight = _np(np.asarray(dense.kernel).T)
    if dense.use_bias:
        spec.bias = _np(dense.bias)


def _fused(spec, denses):
    """Dense layers reading the same input as one ``LinearSpec`` (their rows stacked)."""
    parts = [common_spec.LinearSpec() for _ in denses]
    for part, dense in zip(parts, denses):
        _linear(part, dense)
    ct2_utils.fuse_linear(spec, parts)


def _layer_norm(spec, ln):
    spec.gamma = _np(ln.gamma)
    spec.beta = _np(ln.beta)


def _attention(spec, mha, self_attention):
    """Self-attention: Q/K/V fused in ``linear[0]``; cross: Q ``linear[0]``, K/V ``linear[1]``."""
    if self_attention:
        _fused(spec.linear[0], [mha.W_q, mha.W_k, mha.W_v])
    else:
        _linear(spec.linear[0], mha.W_q)
        _fused(spec.linear[1], [mha.W_k, mha.W_v])
    _linear(spec.linear[-1], mha.W_o)


def _embeddings_and_positions(spec, stack):
    from keras_attn.layers import LearnedPositionalEmbedding

    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _np(stack.embedding.embeddings)
    spec.scale_embeddings = True  # x * sqrt(num_hiddens), as _StackBase.embed
    pos = stack.pos_encoding
    table = pos.embeddings if isinstance(pos, LearnedPositionalEmbedding) else pos.table
    spec.position_encodings.encodings = _np(table)
    if stack.final_norm is not None:  # pre-norm
        _layer_norm(spec.layer_norm, stack.final_norm)


class KerasAttnConverter(Converter):
    """Fill a CTranslate2 ``TransformerSpec`` from a keras_attn Transformer.

    Args:
        model: a model from ``keras_attn.models.transformer_seq2seq`` (checked by
            :func:`check_supported` here, before any conversion).
        src_vocab, tgt_vocab: our token lists (``[PAD]``, ``[UNK]``, ``[START]``,
            ``[END]`` first), registered with the reserved tokens renamed.

    Example:
        >>> tr = Translator.from_run_dir("runs/dates")
        >>> KerasAttnConverter(tr.model, tr.src_tokenizer.vocab, tr.tgt_tokenizer.vocab
        ...                    ).convert("dates_ct2", quantization="int8")
    """

    def __init__(self, model, src_vocab, tgt_vocab):
        self.model = model
        self.options = check_supported(model)
        self.src_vocab = ct2_vocab(list(src_vocab))
        self.tgt_vocab = ct2_vocab(list(tgt_vocab))

    def _load(self):
        o = self.options
        spec = transformer_spec.TransformerSpec.from_config(
            o["num_layers"], int(o["num_heads"]), pre_norm=o["pre_norm"],
            activation=common_spec.Activation.RELU)
        spec.config.layer_norm_epsilon = o["epsilon"]
        spec.config.add_source_eos = True  # Translator.encode appends [END]
        spec.config.decoder_start_token = SPECIAL_TOKENS[text.START]
        encoder, decoder = self.model.get_layer("encoder"), self.model.get_layer("decoder")
        _embeddings_and_positions(spec.encoder, encoder)
        for layer, blk in zip(spec.encoder.layer, encoder.blks):
            _attention(layer.self_attention, blk.attention, self_attention=True)
            _layer_norm(layer.self_attention.layer_norm, blk.addnorm1.ln)
            _linear(layer.ffn.linear_0, blk.ffn.dense1)
            _linear(layer.ffn.linear_1, blk.ffn.dense2)
            _layer_norm(layer.ffn.layer_norm, blk.addnorm2.ln)
        _embeddings_and_positions(spec.decoder, decoder)
        for layer, blk in zip(spec.decoder.layer, decoder.blks):
            _attention(layer.self_attention, blk.attention1, self_attention=True)
            _layer_norm(layer.self_attention.layer_norm, blk.addnorm1.ln)
            _attention(layer.attention, blk.attention2, self_attention=False)
            _layer_norm(layer.attention.layer_norm, blk.addnorm2.ln)
            _linear(layer.ffn.linear_0, blk.ffn.dense1)
            _linear(layer.ffn.linear_1, blk.ffn.dense2)
            _layer_norm(layer.ffn.layer_norm, blk.addnorm3.ln)
        projection = spec.decoder.projection
        if o["tie_embeddings"]:  # logits = x @ E^T + b (TiedLogits)
            projection.weight = _np(decoder.embedding.embeddings)
        else:
            _linear(projection, decoder.dense)
        bias = _np(decoder.dense.bias).copy()
        bias[[text.PAD_ID, text.START_ID]] += BANNED_BIAS  # never generated, as ours
        projection.bias = bias
        spec.register_source_vocabulary(self.src_vocab)
        spec.register_target_vocabulary(self.tgt_vocab)
        return spec
