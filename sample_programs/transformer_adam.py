"""A real-sized training step: an 8-layer transformer language model with optax's
Adam, jitted without donation, as most first versions of a training loop are.

The parameters are a nested dict of 134 arrays; Adam's state holds two more
copies of them (`mu`, `nu`) and a step count, so `train_step` takes 405 input
leaves and returns 404. Nothing is donated, so memscope finds every parameter
and state leaf a `candidate` and advises `donate_argnames=("params",
"opt_state")` with the peak it measured. The batch (`tokens`, int32, and
`mask`, float32) has no output of its shape and stays undonated.

Run it as `python sample_programs/transformer_adam.py --steps 5`; `--layers`,
`--width` and `--batch` change its size.
"""

import argparse

import jax
import jax.numpy as jnp
import optax

VOCAB = 512


def init_params(key, layers, width, seq):
    keys = iter(jax.random.split(key, 4 + 6 * layers))

    def dense(n_in, n_out):
        return {"kernel": jax.random.normal(next(keys), (n_in, n_out)) / n_in ** 0.5,
                "bias": jnp.zeros(n_out)}

    def norm():
        return {"scale": jnp.ones(width), "bias": jnp.zeros(width)}

    return {
        "embed": jax.random.normal(next(keys), (VOCAB, width)) * 0.02,
        "pos": jax.random.normal(next(keys), (seq, width)) * 0.02,
        "layers": [{"ln1": norm(), "ln2": norm(),
                    "attn": {"wq": dense(width, width), "wk": dense(width, width),
                             "wv": dense(width, width), "wo": dense(width, width)},
                    "mlp": {"up": dense(width, 4 * width), "down": dense(4 * width, width)}}
                   for _ in range(layers)],
        "final_ln": norm(),
        "head": dense(width, VOCAB),
    }


def layer_norm(p, x):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return p["scale"] * (x - mean) / jnp.sqrt(var + 1e-5) + p["bias"]


def apply_dense(p, x):
    return x @ p["kernel"] + p["bias"]


def attention(p, x, heads):
    b, t, d = x.shape
    q, k, v = (apply_dense(p[n], x).reshape(b, t, heads, d // heads) for n in ("wq", "wk", "wv"))
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // heads) ** 0.5
    causal = jnp.tril(jnp.ones((t, t), bool))
    weights = jax.nn.softmax(jnp.where(causal, logits, -1e9), axis=-1)
    return apply_dense(p["wo"], jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, d))


def forward(params, tokens, heads):
    x = params["embed"][tokens] + params["pos"][: tokens.shape[1]]
    for layer in params["layers"]:
        x = x + attention(layer["attn"], layer_norm(layer["ln1"], x), heads)
        h = jax.nn.gelu(apply_dense(layer["mlp"]["up"], layer_norm(layer["ln2"], x)))
        x = x + apply_dense(layer["mlp"]["down"], h)
    return apply_dense(params["head"], layer_norm(params["final_ln"], x))


def loss_fn(params, batch, heads):
    logits = forward(params, batch["tokens"][:, :-1], heads)
    targets = batch["tokens"][:, 1:]
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    mask = batch["mask"][:, 1:]
    return (losses * mask).sum() / mask.sum()


optimizer = optax.adam(3e-4)


@jax.jit
def train_step(params, opt_state, batch):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, 4)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return params, opt_state, loss


def make_batch(key, batch, seq):
    tokens = jax.random.randint(key, (batch, seq), 0, VOCAB, dtype=jnp.int32)
    return {"tokens": tokens, "mask": jnp.ones((batch, seq), jnp.float32)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()
    params = init_params(jax.random.key(0), args.layers, args.width, args.seq)
    opt_state = optimizer.init(params)
    for step in range(args.steps):
        batch = make_batch(jax.random.key(step), args.batch, args.seq)
        params, opt_state, loss = train_step(params, opt_state, batch)
    print(f"{len(jax.tree.leaves(params))} parameter arrays; final loss {float(loss):.4f}")
    return params, opt_state


if __name__ == "__main__":
    params, opt_state = main()  # the trained state lives on to the end, as a global
