"""The chapter's other figures: positional encodings, learning-rate schedules and
Nadaraya–Watson kernel regression.

References: D2L 11.2 (Nadaraya–Watson), 11.6.3 (positional encoding); Vaswani et al. 2017,
sections 3.5 and 5.3.
"""
import keras
import numpy as np
from matplotlib.figure import Figure

from keras_attn.viz._common import DPI, save, to_numpy
from keras_attn.viz.heatmaps import show_heatmaps


def plot_positional_encoding(max_len=60, num_hiddens=32, path=None, columns=(6, 7, 8, 9),
                             dpi=DPI):
    """The sinusoidal table: curves of a few dimensions and the position x dimension map.

    Args:
        max_len, num_hiddens: table size (positions, encoding dimensions).
        path: PNG file to write.
        columns: encoding dimensions drawn as curves (D2L draws 6-9).
        dpi: resolution of the saved PNG.

    Returns:
        The Figure (left: curves; right: heatmap, rows = positions, with a colour bar).

    Example:
        >>> plot_positional_encoding(60, 32, path="docs/figures/positional_encoding.png")

    References: Vaswani et al. 2017, section 3.5; D2L 11.6.3.
    """
    from keras_attn.layers.positional_encoding import sinusoidal_table  # noqa: PLC0415

    bad = [c for c in columns if not 0 <= c < num_hiddens]
    if bad:
        raise ValueError(f"`columns` must be in [0, num_hiddens={num_hiddens}). "
                         f"Received: columns={tuple(columns)}")
    table = sinusoidal_table(max_len, num_hiddens)  # (L, d)
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    curves, heat = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    for c in columns:
        curves.plot(np.arange(max_len), table[:, c], label=f"Col {c}")
    curves.set(xlabel="Row (position)", ylabel="P[position, col]",
               title=f"Columns {', '.join(map(str, columns))}")
    curves.legend(fontsize=8, loc="lower left")
    curves.grid(alpha=0.3)
    image = heat.imshow(table, cmap="Blues", aspect="auto", interpolation="nearest")
    heat.set(xlabel="Column (encoding dimension)", ylabel="Row (position)",
             title=f"P ({max_len} positions x {num_hiddens} dimensions)")
    fig.colorbar(image, ax=heat)
    return save(fig, path, dpi)


def plot_schedules(path=None, d_model=512, warmups=(1000, 4000, 8000), total_steps=40000,
                   peak_lr=1e-3, cosine_warmup=2000, decay_steps=30000, alpha=0.1, dpi=DPI):
    """Learning rate against step: Noam with several warmups, and warmup + cosine decay.

    Args:
        path: PNG file to write.
        d_model, warmups: Noam curves ``NoamSchedule(d_model, w)`` for each ``w``.
        total_steps: steps on the x axis.
        peak_lr, cosine_warmup, decay_steps, alpha: ``WarmupCosineDecay`` arguments.
        dpi: resolution of the saved PNG.

    Returns:
        The Figure (left: Noam; right: cosine).

    Example:
        >>> plot_schedules("docs/figures/schedules.png")

    References: Vaswani et al. 2017, section 5.3; Loshchilov & Hutter 2017 (SGDR).
    """
    from keras_attn.schedules import NoamSchedule, WarmupCosineDecay  # noqa: PLC0415

    steps = np.arange(0, total_steps + 1, max(total_steps // 1000, 1), dtype="float32")
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    noam_ax, cos_ax = fig.subplots(1, 2)
    for w in warmups:
        lr = to_numpy(NoamSchedule(d_model, w)(steps))
        noam_ax.plot(steps, lr, label=f"warmup {w}")
    noam_ax.set(xlabel="Step", ylabel="Learning rate", title=f"NoamSchedule (d_model={d_model})")
    noam_ax.legend(fontsize=8)
    schedule = WarmupCosineDecay(peak_lr, cosine_warmup, decay_steps, alpha)
    cos_ax.plot(steps, to_numpy(schedule(steps)), color="C3",
                label=f"peak {peak_lr:g}, warmup {cosine_warmup},\n"
                      f"decay {decay_steps}, alpha {alpha:g}")
    cos_ax.axvline(cosine_warmup, color="0.6", ls="--", lw=1)
    cos_ax.set(xlabel="Step", ylabel="Learning rate", title="WarmupCosineDecay")
    cos_ax.legend(fontsize=8)
    for ax in (noam_ax, cos_ax):
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    return save(fig, path, dpi)


# --- Nadaraya–Watson kernel regression (D2L 11.2) ------------------------------------------
def _true_function(x):
    return 2 * np.sin(x) + x ** 0.8


def leave_one_out(x):
    """``(n, n-1)``: row ``i`` holds every entry of ``x`` except ``x[i]``.

    Example:
        >>> leave_one_out(np.array([1., 2., 3.]))   # [[2, 3], [1, 3], [1, 2]]
    """
    x = np.asarray(x)
    n = x.shape[0]
    return np.broadcast_to(x, (n, n))[~np.eye(n, dtype=bool)].reshape(n, n - 1)


def kernel_regression_demo(path_prefix=None, epochs=5, seed=0, n_train=50, lr=0.5,
                           verbose=True, dpi=DPI):
    """D2L's attention-pooling example: average, non-parametric and parametric Nadaraya–Watson.

    Data: ``y = 2 sin(x) + x^0.8 + eps``, ``eps ~ N(0, 0.5)``, ``n_train`` sorted inputs
    uniform in [0, 5); the parametric model is trained by full-batch SGD on the MSE, each
    training point attending to the *other* training points (:func:`leave_one_out`).

    Args:
        path_prefix: write ``<path_prefix>_predictions.png`` (the three fits and the loss)
            and ``<path_prefix>_attention.png`` (test x training weights of both kernels).
        epochs: SGD steps. seed: NumPy seed of the data. n_train: training points.
        lr: SGD learning rate. verbose: print the loss of every epoch.
        dpi: resolution of the saved PNGs.

    Returns:
        dict: ``nonparametric_loss`` and ``parametric_loss`` (final training MSE, leave-one-out),
        ``epoch_losses`` (list), ``w`` (learned bandwidth), ``test_mse`` (per model) and
        ``figures`` (``{"predictions": Figure, "attention": Figure}``).

    Example:
        >>> kernel_regression_demo("docs/figures/kernel_regression")["parametric_loss"]

    References: Nadaraya 1964, Watson 1964; D2L 11.2.
    """
    import tensorflow as tf  # noqa: PLC0415  (the package's backend)

    from keras_attn.layers import NadarayaWatson  # noqa: PLC0415

    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"`epochs` must be an int >= 1. Received: epochs={epochs!r}")
    if not isinstance(n_train, int) or n_train < 3:
        raise ValueError(f"`n_train` must be an int >= 3. Received: n_train={n_train!r}")
    rng = np.random.default_rng(seed)
    x_train = np.sort(rng.random(n_train) * 5).astype("float32")
    y_train = (_true_function(x_train) + rng.normal(0.0, 0.5, n_train)).astype("float32")
    x_test = np.arange(0, 5, 0.1, dtype="float32")
    y_truth = _true_function(x_test)
    keys, values = leave_one_out(x_train), leave_one_out(y_train)  # (n, n-1)

    def mse(pred, target):
        return float(np.mean((to_numpy(pred) - target) ** 2))

    y_avg = np.full_like(x_test, y_train.mean())
    fixed = NadarayaWatson(learnable=False)
    y_fixed, w_fixed = fixed(x_test, x_train, y_train, return_attention_scores=True)
    nonparametric_loss = mse(fixed(x_train, keys, values), y_train)

    net = NadarayaWatson(learnable=True)
    net.build()
    optimizer = keras.optimizers.SGD(learning_rate=lr)
    epoch_losses = []
    for epoch in range(epochs):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.square(net(x_train, keys, values) - y_train))
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
        epoch_losses.append(float(loss))
        if verbose:
            print(f"epoch {epoch + 1}, loss {float(loss):.6f}")
    parametric_loss = mse(net(x_train, keys, values), y_train)
    w = float(to_numpy(net.w))
    y_param, w_param = net(x_test, x_train, y_train, return_attention_scores=True)
    if verbose:
        print(f"final training loss: non-parametric {nonparametric_loss:.4f}, "
              f"parametric {parametric_loss:.4f} (w = {w:.3f})")

    preds = {"average pooling": y_avg, "non-parametric (w = 1)": to_numpy(y_fixed),
             f"parametric (w = {w:.2f})": to_numpy(y_param)}
    fig = Figure(figsize=(10, 6.4), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    for ax, (name, pred) in zip(axes, preds.items()):
        ax.plot(x_test, y_truth, label="truth")
        ax.plot(x_test, pred, "--", label="pred")
        ax.plot(x_train, y_train, "o", alpha=0.5, ms=4, label="training data")
        ax.set(xlabel="x", ylabel="y", xlim=(0, 5), ylim=(-1, 5),
               title=f"{name}: test MSE {mse(pred, y_truth):.3f}")
        ax.legend(fontsize=8, loc="upper right")
    loss_ax = axes[3]
    loss_ax.plot(range(1, epochs + 1), epoch_losses, "o-", label="parametric")
    loss_ax.axhline(nonparametric_loss, color="C1", ls="--", label="non-parametric")
    loss_ax.set(xlabel="epoch", ylabel="training MSE (leave-one-out)",
                title="Training loss of the parametric kernel")
    loss_ax.legend(fontsize=8)
    save(fig, f"{path_prefix}_predictions.png" if path_prefix else None, dpi)
    heat = show_heatmaps(
        np.stack([to_numpy(w_fixed), to_numpy(w_param)])[None],
        xlabel="Sorted training inputs", ylabel="Sorted testing inputs",
        titles=["Non-parametric (w = 1)", f"Parametric (w = {w:.2f})"], figsize=(10, 4.4),
        suptitle="Nadaraya–Watson attention weights",
        path=f"{path_prefix}_attention.png" if path_prefix else None, dpi=dpi)
    return {"nonparametric_loss": nonparametric_loss, "parametric_loss": parametric_loss,
            "epoch_losses": epoch_losses, "w": w,
            "test_mse": {name: mse(pred, y_truth) for name, pred in preds.items()},
            "figures": {"predictions": fig, "attention": heat}}
