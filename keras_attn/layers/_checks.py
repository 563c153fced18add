"""Argument validation shared by the layers: one message style, naming argument and value."""
import inspect

import keras


def check_rate(name, value):
    """A dropout rate must be a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be a float in [0, 1). Received: {name}={value!r}")
    return float(value)


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    return value


def check_heads(num_hiddens, num_heads):
    """``num_hiddens`` must split into ``num_heads`` heads of equal size."""
    if num_hiddens % num_heads:
        raise ValueError(
            "`num_hiddens` must be divisible by `num_heads`. "
            f"Received: num_hiddens={num_hiddens}, num_heads={num_heads}"
        )


def check_rank(name, tensor, ranks):
    """Raise ValueError unless ``tensor``'s rank is in ``ranks`` (an int or a tuple)."""
    ranks = (ranks,) if isinstance(ranks, int) else tuple(ranks)
    shape = tuple(tensor.shape)
    if len(shape) not in ranks:
        expected = " or ".join(str(r) for r in ranks)
        raise ValueError(
            f"`{name}` must have rank {expected}. Received: {name} with shape={shape}"
        )


def check_same_dim(name_a, a, name_b, b, axis, what):
    """Raise ValueError when the static sizes of ``axis`` differ (unknown sizes pass)."""
    da, db = a.shape[axis], b.shape[axis]
    if da is not None and db is not None and da != db:
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same {what}. Received: "
            f"{name_a} with shape={tuple(a.shape)}, {name_b} with shape={tuple(b.shape)}"
        )


def check_qkv(queries, keys, values, feature_match=False):
    """The checks every (B, Q, d) / (B, K, d) / (B, K, v) attention layer makes."""
    for name, tensor in (("queries", queries), ("keys", keys), ("values", values)):
        check_rank(name, tensor, 3)
    check_same_dim("queries", queries, "keys", keys, 0, "batch size")
    check_same_dim("queries", queries, "values", values, 0, "batch size")
    check_same_dim("keys", keys, "values", values, 1, "length (number of keys)")
    if feature_match:
        check_same_dim("queries", queries, "keys", keys, -1, "feature size")


def _config_arg_names(cls):
    """Constructor argument names of ``cls`` and the classes its ``**kwargs`` reach, up to
    ``keras.layers.Layer`` (whose ``**kwargs`` also take ``input_dim`` / ``input_shape``)."""
    names = {"input_dim", "input_shape"}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())
        names |= {p.name for p in params[1:]
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        if klass is keras.layers.Layer or not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return names


def strict_from_config(cls, config):
    """``from_config`` that raises ``ValueError`` naming unknown keys and their values.

    ``keras.layers.Layer.from_config`` turns every error (ours included) into a
    ``TypeError`` that quotes the whole config; this one lets the constructor's own
    ``ValueError`` through and names unknown keys, as the API contract promises.
    """
    unknown = sorted(set(config) - _config_arg_names(cls))
    if unknown:
        received = ", ".join(f"{k}={config[k]!r}" for k in unknown)
        raise ValueError(f"Unknown config key(s) for {cls.__name__}: {unknown}. "
                         f"Received: {received}")
    config = dict(config)
    if isinstance(config.get("dtype"), dict):  # as keras.layers.Layer.from_config does
        policy = keras.dtype_policies.deserialize(config["dtype"])
        plain = (not isinstance(policy, keras.dtype_policies.DTypePolicyMap)
                 and policy.quantization_mode is None)
        config["dtype"] = policy.name if plain else policy
    return cls(**config)
