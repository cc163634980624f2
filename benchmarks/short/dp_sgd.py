"""DP-SGD: per-example gradients (vmap of grad), clipped, noised and averaged,
on a small convolutional model; a few steps. Compile-bound."""

import jax
import jax.numpy as jnp

CLIP, NOISE, LR = 1.0, 1.1, 0.1


def init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return {"conv": jax.random.normal(k1, (3, 3, 1, 16)) * 0.1,
            "dense": jax.random.normal(k2, (16 * 14 * 14, 64)) * 0.01,
            "out": jax.random.normal(k3, (64, 10)) * 0.1}


def forward(params, image):
    x = jax.lax.conv_general_dilated(image[None, ..., None], params["conv"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    x = jax.nn.relu(x)
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    x = jax.nn.relu(x.reshape(-1) @ params["dense"])
    return x @ params["out"]


def loss(params, image, label):
    return -jax.nn.log_softmax(forward(params, image))[label]


@jax.jit
def private_step(params, images, labels, key):
    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, images, labels)
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(g.shape[0], -1) ** 2, axis=1)
                         for g in jax.tree.leaves(grads)))
    scale = jnp.minimum(1.0, CLIP / (norms + 1e-6))
    keys = jax.random.split(key, len(jax.tree.leaves(grads)))
    leaves, tree = jax.tree.flatten(grads)
    noised = [
        (jnp.einsum("b,b...->...", scale, g) + NOISE * CLIP * jax.random.normal(k, g.shape[1:]))
        / images.shape[0] for g, k in zip(leaves, keys, strict=True)]
    return jax.tree.map(lambda p, g: p - LR * g, params, jax.tree.unflatten(tree, noised))


params = init(jax.random.key(0))
images = jax.random.normal(jax.random.key(1), (32, 28, 28))
labels = jax.random.randint(jax.random.key(2), (32,), 0, 10)
for step in range(5):
    params = private_step(params, images, labels, jax.random.key(10 + step))
print("logit", float(forward(params, images[0])[0]))
