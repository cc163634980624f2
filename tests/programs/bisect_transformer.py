"""A small decoder-only transformer's train step: its layers under lax.scan, each
under jax.checkpoint(policy=nothing_saveable), SGD, the parameters donated.

memscope bisect's tests: XLA:CPU's temporaries for this step grew between JAX
0.10.1 and 0.10.2 (XLA's dot-library-rewriter, new there, keeps more of the
attention's temporaries), and did not move between 0.9.0 and 0.10.1.
"""

import functools

import jax
import jax.numpy as jnp

D, H, L, T, B, V = 128, 4, 2, 64, 4, 512


def init(key):
    ks = jax.random.split(key, 5)
    s = 0.02
    layers = dict(
        wqkv=jax.random.normal(ks[0], (L, D, 3 * D)) * s,
        wo=jax.random.normal(ks[1], (L, D, D)) * s,
        w1=jax.random.normal(ks[2], (L, D, 4 * D)) * s,
        w2=jax.random.normal(ks[3], (L, 4 * D, D)) * s,
        g1=jnp.ones((L, D)), g2=jnp.ones((L, D)))
    return dict(emb=jax.random.normal(ks[4], (V, D)) * s, layers=layers)


def norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def block(x, p):
    h = norm(x, p["g1"])
    q, k, v = jnp.split(h @ p["wqkv"], 3, -1)
    q, k, v = (t.reshape(B, T, H, D // H) for t in (q, k, v))
    a = jnp.einsum("bqhd,bkhd->bhqk", q, k) / (D // H) ** 0.5
    a = jnp.where(jnp.tril(jnp.ones((T, T), bool)), a, -1e9)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(a, -1), v).reshape(B, T, D)
    x = x + o @ p["wo"]
    return x + jax.nn.gelu(norm(x, p["g2"]) @ p["w1"]) @ p["w2"], None


def loss(params, tokens):
    x = params["emb"][tokens]
    step = jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)
    x, _ = jax.lax.scan(step, x, params["layers"])
    logits = jax.nn.log_softmax((x @ params["emb"].T)[:, :-1])
    return -jnp.mean(jnp.take_along_axis(logits, tokens[:, 1:, None], -1))


@functools.partial(jax.jit, donate_argnums=0)
def train_step(params, tokens):
    value, grads = jax.value_and_grad(loss)(params, tokens)
    return jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads), value


def batch(i):
    return jax.random.randint(jax.random.key(i), (B, T), 0, V)


def main():
    params = init(jax.random.key(0))
    for i in range(3):
        params, value = train_step(params, batch(i))
    print(f"loss {float(value):.4f}")


if __name__ == "__main__":
    main()
