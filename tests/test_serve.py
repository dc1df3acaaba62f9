"""SGLangClient end to end against `jaxrl-agent serve` (embedded engine, loopback port)."""

import concurrent.futures
import time

import httpx
import jax
import numpy as np
import pytest

from jaxrl_agent import cli
from jaxrl_agent.models.config import tiny_config
from jaxrl_agent.models.transformer import init_params
from jaxrl_agent.rollout.embedded import EmbeddedEngine
from jaxrl_agent.rollout.engine import SamplingParams
from jaxrl_agent.rollout.server import ServerThread, create_app
from jaxrl_agent.rollout.sglang_client import SGLangClient
from jaxrl_agent.rollout.sglang_responses import SGLangRequestError
from jaxrl_agent.rollout.weight_sync import export_for_engine

# Same shapes as tests/test_embedded_engine.py, so the jit cache is shared.
CONFIG = tiny_config(vocab_size=64, dtype="float32", tie_word_embeddings=False)
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9], [10], [11, 12, 13, 14]]
GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)


@pytest.fixture(scope="module")
def engine():
    return EmbeddedEngine(init_params(CONFIG, jax.random.key(0)), CONFIG, max_seq_len=32,
                          batch_buckets=(4,), prompt_buckets=(16,), steps_per_call=2)


@pytest.fixture(scope="module")
def server(engine):
    with ServerThread(create_app(engine, pause_timeout_s=0.5)) as srv:
        yield srv


@pytest.fixture()
def client(server):
    return SGLangClient(server.url, timeout_s=60.0, max_retries=1, backoff_s=0.01)


def test_generate_batch_with_logprobs_matches_engine(client, server, engine):
    sampling = SamplingParams(max_new_tokens=5, temperature=1.0, seed=3)
    outs = client.generate(PROMPTS, sampling)  # one request per prompt, batched by the server
    direct = [engine.generate([p], sampling)[0] for p in PROMPTS]  # seeds are per request
    for o, d in zip(outs, direct):
        assert o.finish_reason == "length" and o.output_ids == d.output_ids
        np.testing.assert_allclose(o.logprobs, d.logprobs, atol=1e-5)
        assert o.weight_version == engine.weight_version and o.meta["cached_tokens"] == 0
    # Raw SGLang batch shape: a list, one item per prompt, SGLang's meta_info fields.
    resp = httpx.post(server.url + "/generate", json={
        "input_ids": PROMPTS[:2], "sampling_params": {"max_new_tokens": 3, "temperature": 0},
        "return_logprob": True, "rid": ["x", "y"]})
    items = resp.json()
    assert resp.status_code == 200 and [i["meta_info"]["id"] for i in items] == ["x", "y"]
    assert set(items[0]["meta_info"]) == {
        "id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens",
        "weight_version", "e2e_latency", "output_token_logprobs"}
    assert items[0]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    assert [t for _, t, _ in items[1]["meta_info"]["output_token_logprobs"]] == items[1][
        "output_ids"]


def test_weight_update_from_disk_changes_outputs_and_version(client, tmp_path):
    before = client.generate(PROMPTS, GREEDY)
    path = export_for_engine(init_params(CONFIG, jax.random.key(9)), CONFIG, tmp_path, step=7)
    client.update_weights_from_disk(path, "7")
    after = client.generate(PROMPTS, GREEDY)
    assert [o.output_ids for o in after] != [o.output_ids for o in before]
    assert all(o.weight_version == "7" for o in after) and client.weight_version == "7"
    assert client.get_model_info()[0]["model_path"] == path
    with pytest.raises(SGLangRequestError, match="update_weights_from_disk.*400"):
        client.update_weights_from_disk(str(tmp_path / "missing"), "8")
    assert client.refresh_weight_version() == "7"  # failed update keeps the old weights


def test_pause_and_continue(client, server):
    raw = httpx.post(server.url + "/pause_generation", json={"mode": "in_place"})
    assert raw.json()["status"] == "ok"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(client.generate, [PROMPTS[0]], GREEDY)
        time.sleep(0.2)
        assert not fut.done()  # waits while paused
        client.continue_generation()
        assert fut.result(timeout=30)[0].finish_reason == "length"
    # Paused longer than the server's pause timeout: 503, retried, then a clear error.
    client.pause_generation()
    try:
        r = httpx.post(server.url + "/generate", json={"input_ids": [1, 2]})
        assert r.status_code == 503 and "paused" in r.json()["error"]["message"]
    finally:
        client.continue_generation()


def test_abort_request_reports_abort(client, server):
    httpx.post(server.url + "/pause_generation", json={"mode": "in_place"})
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(httpx.post, server.url + "/generate", json={
            "input_ids": [1, 2, 3], "rid": "to-abort", "return_logprob": True}, timeout=30)
        deadline = time.monotonic() + 10
        while httpx.get(server.url + "/get_server_info").json()["running_requests"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert httpx.post(server.url + "/abort_request", json={"rid": "to-abort"}).json() == {
            "num_aborted": 1}
        client.continue_generation()
        item = fut.result().json()
    assert item["meta_info"]["finish_reason"]["type"] == "abort" and item["output_ids"] == []


@pytest.mark.parametrize("body, status, message", [
    ({"sampling_params": {}}, 400, "input_ids: required"),
    ({"input_ids": [1, "a"]}, 400, "input_ids: expected a non-empty list of ints"),
    ({"input_ids": list(range(1, 33))}, 400, "prompt has 32 tokens; the context is 32"),
    ({"input_ids": [1], "sampling_params": {"temperature": "hot"}}, 400,
     "sampling_params.temperature: expected float"),
    ({"input_ids": [1], "sampling_params": {"top_k": 0}}, 400, "top_k"),
    ({"input_ids": [1], "stream": True}, 400, "stream"),
])
def test_bad_requests_get_4xx_messages(server, body, status, message):
    r = httpx.post(server.url + "/generate", json=body)
    assert r.status_code == status and message in r.json()["error"]["message"]


def test_client_surfaces_4xx_and_unknown_routes(client, server):
    with pytest.raises(SGLangRequestError, match="prompt has 40 tokens") as err:
        client.generate([list(range(1, 41))], GREEDY)
    assert err.value.status_code == 400
    r = httpx.get(server.url + "/no_such_route")
    assert r.status_code == 404 and "unknown route" in r.json()["error"]["message"]
    assert httpx.post(server.url + "/generate", content=b"{nope").status_code == 400
    assert client.health() and httpx.get(server.url + "/health_generate").status_code == 200
    assert httpx.get(server.url + "/flush_cache").status_code == 200


def test_cli_serve_parses_flags(monkeypatch):
    seen = {}
    monkeypatch.setattr("jaxrl_agent.rollout.server.serve", lambda args: seen.update(vars(args)))
    assert cli.main(["serve", "--tiny-random", "--port", "31234", "--max-seq-len", "64"]) == 0
    assert seen["port"] == 31234 and seen["tiny_random"] and seen["max_seq_len"] == 64
    with pytest.raises(SystemExit):
        cli.main(["serve", "--port", "1"])  # --model-dir or --tiny-random is required
