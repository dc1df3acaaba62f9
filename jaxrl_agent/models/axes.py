"""Logical axis names of parameters and activations.

The model annotates arrays with these names; the learner maps them to the
mesh axes ('data', 'fsdp', 'tensor') through one rule table
(`jaxrl_agent.learner.sharding`). Keep this list small.
"""

BATCH = "batch"  # activations: episodes
LENGTH = "length"  # activations: tokens
EMBED = "embed"  # model width D
VOCAB = "vocab"  # vocabulary V
MLP = "mlp"  # MLP hidden width
HEADS = "heads"  # attention heads H (query)
KV_HEADS = "kv_heads"  # key/value heads K
HEAD_DIM = "head_dim"  # per-head width
LAYERS = "layers"  # stacked (scanned) layer axis, if used
