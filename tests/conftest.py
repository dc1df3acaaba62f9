"""Test configuration: 8 fake CPU devices, set before JAX initializes."""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402  (must come after XLA_FLAGS)

jax.config.update("jax_enable_x64", False)
