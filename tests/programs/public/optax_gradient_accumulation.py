# Optax's public notebook examples/gradient_accumulation_and_microbatching.ipynb
# (google-deepmind/optax, Apache License 2.0), its code cells run as one script
# as a user runs a notebook top to bottom; the sizes scaled down to run in
# seconds on a CPU (hidden_size 64, 2 layers, vocabulary 500, sequences of 32,
# batch 8; the last section's 128 x 256), nothing else changed. Each cell makes
# new state (an accumulator, a MultiSteps optimizer state, a new optimizer
# state): live arrays rise between the cells, and no loop keeps what a step
# returns.
import jax
import jax.numpy as jnp
import optax
from flax import nnx
import functools
import time
from optax import microbatching
import gc

class TransformerBlock(nnx.Module):
  def __init__(self, hidden_size: int, num_heads: int, *, rngs: nnx.Rngs):
    self.norm1 = nnx.LayerNorm(hidden_size, rngs=rngs)
    self.mha = nnx.MultiHeadAttention(num_heads, hidden_size, rngs=rngs)
    self.norm2 = nnx.LayerNorm(hidden_size, rngs=rngs)
    self.mlp = nnx.Sequential(
        nnx.Linear(hidden_size, 4*hidden_size, rngs=rngs),
        jax.nn.gelu,
        nnx.Linear(4*hidden_size, hidden_size, rngs=rngs),
    )

  def __call__(self, x: jax.Array) -> jax.Array:
    attention_output = self.mha(self.norm1(x), self.norm1(x), self.norm1(x), decode=False)
    x = x + attention_output
    mlp_output = self.mlp(self.norm2(x))
    return x + mlp_output

class Transformer(nnx.Module, pytree=False):
  def __init__(self, vocab_size: int, num_layers: int, hidden_size: int, num_heads: int = 8, *, rngs: nnx.Rngs):
    self.embedding = nnx.Embed(vocab_size, hidden_size, rngs=rngs)
    self.layers = [TransformerBlock(hidden_size, num_heads, rngs=rngs) for _ in range(num_layers)]
    self.final_layer = nnx.Linear(hidden_size, vocab_size, rngs=rngs)

  def __call__(self, x: jax.Array):
    x = self.embedding(x)

    for layer in self.layers:
      x = layer(x)

    logits = self.final_layer(x)
    return logits

hidden_size = 64
num_heads = 8
num_layers = 2
vocab_size = 500
data_size = 8192
sequence_length = 32
batch_size = 8
accumulation_steps = 16

model = Transformer(vocab_size, num_layers, hidden_size, num_heads, rngs=nnx.Rngs(0))
key = jax.random.key(0)
batch = jax.random.randint(key, (batch_size, sequence_length), 0, vocab_size)

graphdef, params = nnx.split(model, nnx.Variable)
print(optax.tree.size(params))

adamw = optax.adamw(0.01)
opt_state = adamw.init(params)

def loss_fn(params, batch):
  model = nnx.merge(graphdef, params)
  logits = model(batch)
  return optax.softmax_cross_entropy_with_integer_labels(
      logits[:, :-1], labels=batch[:,1:]
  ).mean()


@functools.partial(jax.jit, donate_argnums=(0,1))
def update_fn(params, opt_state, batch):
  loss, grads = jax.value_and_grad(loss_fn)(params, batch)
  updates, opt_state = adamw.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state

update_fn.lower(params, opt_state, batch).compile()

@functools.partial(jax.jit, donate_argnums=(2,))
def add_gradient(params, batch, accumulated_gradients):
  grad = jax.grad(loss_fn)(params, batch)
  return jax.tree.map(jnp.add, grad, accumulated_gradients)


@functools.partial(jax.jit, donate_argnums=(0, 1, 2))
def update_params(params, opt_state, accumulated_gradients):
  updates, opt_state = adamw.update(accumulated_gradients, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state, optax.tree.zeros_like(accumulated_gradients)

accumulated_gradients = optax.tree.zeros_like(params)
add_gradient.lower(params, batch, accumulated_gradients).compile()
update_params.lower(params, opt_state, accumulated_gradients).compile()

start_time = time.perf_counter()
for i in range(accumulation_steps):
  accumulated_gradients = add_gradient(params, batch, accumulated_gradients)

params, opt_state, accumulated_gradients = jax.block_until_ready(
    update_params(params, opt_state, accumulated_gradients)
)
end_time = time.perf_counter()
print('Total Time', end_time - start_time)

multi_adam = optax.MultiSteps(adamw, accumulation_steps)

@functools.partial(jax.jit, donate_argnums=(0, 2))
def update_fn_v2(params, batch, opt_state):
  grads = jax.grad(loss_fn)(params, batch)
  updates, opt_state = multi_adam.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state

multi_opt_state = multi_adam.init(params)
update_fn_v2.lower(params, batch, multi_opt_state).compile()

start_time = time.perf_counter()
for i in range(accumulation_steps):
  params, multi_opt_state = update_fn_v2(params, batch, multi_opt_state)

jax.block_until_ready((params, multi_opt_state))
end_time = time.perf_counter()
print('Total Time', end_time - start_time)

@functools.partial(jax.jit, donate_argnums=(0, 2))
def update_fn_v3(params, batch, opt_state):
  grads = microbatching.microbatch(
      jax.grad(loss_fn),
      argnums=1,
      microbatch_size=batch_size,
  )(params, batch)
  updates, opt_state = adamw.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  return params, opt_state

full_batch = jnp.vstack([batch]*accumulation_steps)
update_fn_v3.lower(params, full_batch, opt_state).compile()

start_time = time.perf_counter()
params, opt_state = jax.block_until_ready(update_fn_v3(params, full_batch, opt_state))
end_time = time.perf_counter()
print('Total Time', end_time - start_time)

def expensive_function(x):
  return jax.nn.softmax(jnp.sin(jnp.outer(x, x))).sum(axis=0)

B = 128
N = 256
X = jax.random.normal(jax.random.key(0), (B, N))

# processing more examples at a time can cause ResourceExhausted errors.
result = jax.jit(jax.vmap(expensive_function))(X[:32])
result = jax.block_until_ready(result)
gc.collect()
print('Processed small batch', result.shape)
print(result)

result = microbatching.micro_vmap(expensive_function, microbatch_size=32)(X)
result = jax.block_until_ready(result)
gc.collect()
print('Processed Full Batch', result.shape)
print(result)

def metrics_fn(per_example_grad):
  leaf_norms = jax.tree.map(jnp.linalg.norm, per_example_grad)
  return leaf_norms

grad_fn = microbatching.micro_grad(loss_fn, metrics_fn=metrics_fn, microbatch_size=8)

grad, aux = jax.jit(grad_fn)(params, batch)

# This shows the norm for the gradient of the embedding layer per example.
# High uniformity of the norm values is encouraging.
aux.metrics['embedding']['embedding'].get_value()
