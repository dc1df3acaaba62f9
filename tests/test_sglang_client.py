"""SGLangClient without a model: recorded response shapes and injected faults."""

import asyncio
import copy
import json
import socket
import time

import httpx
import pytest

from jaxrl_agent.rollout.engine import RolloutEngine, SamplingParams
from jaxrl_agent.rollout.sglang_client import SGLangClient
from jaxrl_agent.rollout.sglang_responses import (
    SGLangConnectionError,
    SGLangRequestError,
    SGLangResponseError,
    parse_generate_item,
)

# Written by hand from docs/SGLANG_API.md: one item per finish reason, with
# fields a newer SGLang may add ("text", "hidden_states", "spec_verify_ct").
STOP_ITEM = {
    "text": "",
    "output_ids": [17, 4, 151645],
    "meta_info": {
        "id": "a1", "finish_reason": {"type": "stop", "matched": 151645},
        "prompt_tokens": 5, "completion_tokens": 3, "cached_tokens": 2,
        "weight_version": "12", "e2e_latency": 0.25, "spec_verify_ct": 0,
        "output_token_logprobs": [
            [-0.5, 17, None], [-1.25, 4, None], [-0.01, 151645, "<|im_end|>"]],
    },
    "hidden_states": None,
}
LENGTH_ITEM = {
    "output_ids": [9, 9],
    "meta_info": {
        "id": "a2", "finish_reason": {"type": "length", "length": 2},
        "prompt_tokens": 3, "completion_tokens": 2, "cached_tokens": 0,
        "weight_version": "default", "e2e_latency": 0.1,
        "output_token_logprobs": [[-2.0, 9, None], [-3.0, 9, None]],
    },
}
ABORT_ITEM = {
    "output_ids": [5, 6, 7],
    "meta_info": {
        "id": "a3", "finish_reason": {"type": "abort", "message": "Abort by request"},
        "prompt_tokens": 3, "completion_tokens": 3, "cached_tokens": 0,
        "weight_version": "12", "e2e_latency": 0.3,
        "output_token_logprobs": [[-0.1, 5, None], [-0.2, 6, None]],
    },
}
SAMPLING = SamplingParams(max_new_tokens=4, temperature=1.0)


def test_parse_recorded_items_keeps_unknown_keys():
    out = parse_generate_item(json.loads(json.dumps(STOP_ITEM)))
    assert out.output_ids == [17, 4, 151645] and out.logprobs == [-0.5, -1.25, -0.01]
    assert out.finish_reason == "stop" and out.weight_version == "12"
    assert out.meta["spec_verify_ct"] == 0 and "hidden_states" in out.meta
    assert out.meta["finish_reason"]["matched"] == 151645 and out.meta["cached_tokens"] == 2
    assert parse_generate_item(LENGTH_ITEM).finish_reason == "length"
    aborted = parse_generate_item(ABORT_ITEM)  # partial output, truncated to logprobs
    assert aborted.finish_reason == "abort" and aborted.output_ids == [5, 6]


@pytest.mark.parametrize("path, pattern", [
    (("meta_info", "weight_version"), r"meta_info\.weight_version: required field missing"),
    (("meta_info", "output_token_logprobs"), r"meta_info\.output_token_logprobs: required"),
    (("meta_info", "finish_reason"), r"meta_info\.finish_reason: required"),
    (("output_ids",), r"response\.output_ids: required field missing"),
])
def test_parse_missing_field_is_named(path, pattern):
    item = copy.deepcopy(LENGTH_ITEM)
    d = item
    for key in path[:-1]:
        d = d[key]
    del d[path[-1]]
    with pytest.raises(SGLangResponseError, match=pattern):
        parse_generate_item(item)


def test_parse_rejects_mismatched_logprob_ids():
    item = copy.deepcopy(LENGTH_ITEM)
    item["meta_info"]["output_token_logprobs"][1][1] = 3
    with pytest.raises(SGLangResponseError, match="do not match output_ids"):
        parse_generate_item(item)


def fake(handler, **kw):
    kw = {"max_retries": 2, "backoff_s": 0.01, "timeout_s": 5.0, **kw}
    urls = kw.pop("urls", "http://sglang-a:30000")
    return SGLangClient(urls, transport=httpx.MockTransport(handler), **kw)


def test_generate_sends_sglang_request_and_round_robins():
    seen = []

    def handler(request: httpx.Request):
        body = json.loads(request.content)
        seen.append((request.url.host, body))
        item = copy.deepcopy(LENGTH_ITEM)
        item["meta_info"]["prompt_tokens"] = len(body["input_ids"])
        return httpx.Response(200, json=item)

    client = fake(handler, urls=["http://sglang-a:30000", "http://sglang-b:30000/"])
    assert isinstance(client, RolloutEngine)
    outs = client.generate([[1, 2], [3], [4, 5, 6], [7]], SAMPLING)
    assert [o.meta["prompt_tokens"] for o in outs] == [2, 1, 3, 1]  # prompt order kept
    assert sorted(h for h, _ in seen) == ["sglang-a", "sglang-a", "sglang-b", "sglang-b"]
    body = seen[0][1]
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1
    assert body["sampling_params"] == SAMPLING.to_sglang() and body["stream"] is False
    assert client.weight_version == "default"


def test_concurrency_is_limited_by_semaphore():
    state = {"now": 0, "max": 0}

    async def handler(request):
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.02)
        state["now"] -= 1
        return httpx.Response(200, json=LENGTH_ITEM)

    client = fake(handler, max_concurrency=3)
    outs = asyncio.run(client.agenerate([[1]] * 12, SAMPLING))
    assert len(outs) == 12 and state["max"] == 3


def test_503_then_success_is_retried():
    calls = []

    def handler(request):
        calls.append(request.url.path)
        if len(calls) < 3:
            return httpx.Response(503, json={"error": {"message": "starting"}})
        return httpx.Response(200, json=LENGTH_ITEM)

    out = fake(handler).generate([[1, 2]], SAMPLING)[0]
    assert out.output_ids == [9, 9] and calls == ["/generate"] * 3


def test_timeouts_are_retried_then_raise_naming_server():
    def handler(request):
        raise httpx.ReadTimeout("read timed out", request=request)

    with pytest.raises(SGLangConnectionError, match=r"sglang-a:30000.*3 attempt.*ReadTimeout"):
        fake(handler).generate([[1]], SAMPLING)


def test_closed_port_raises_connection_error_naming_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    url = f"http://127.0.0.1:{port}"
    client = SGLangClient(url, max_retries=2, backoff_s=0.01, timeout_s=2.0)
    t0 = time.monotonic()
    with pytest.raises(SGLangConnectionError) as err:
        client.generate([[1, 2]], SAMPLING)
    assert err.value.url == url and url in str(err.value) and "ConnectError" in str(err.value)
    assert time.monotonic() - t0 < 10
    assert client.health() is False


@pytest.mark.parametrize("body, message", [
    ({"error": {"message": "The input (40 tokens) is longer than the context"}}, "longer than"),
    ({"detail": "Not Found"}, "Not Found"),
])
def test_4xx_surfaces_server_message_without_retry(body, message):
    calls = []

    def handler(request):
        calls.append(1)
        return httpx.Response(400, json=body)

    with pytest.raises(SGLangRequestError, match=message) as err:
        fake(handler).generate([[1]], SAMPLING)
    assert err.value.status_code == 400 and len(calls) == 1


def test_abort_is_reported_as_abort():
    out = fake(lambda r: httpx.Response(200, json=ABORT_ITEM)).generate([[1]], SAMPLING)[0]
    assert out.finish_reason == "abort" and out.output_ids == [5, 6]


def test_generate_inside_running_event_loop():
    client = fake(lambda r: httpx.Response(200, json=LENGTH_ITEM))

    async def main():
        return client.generate([[1]], SAMPLING)  # sync call from async code: own loop

    assert asyncio.run(main())[0].output_ids == [9, 9]


class FakeControl:
    """Records control calls; serves `served_version` from /get_model_info."""

    def __init__(self, update_status=200, served_version=None):
        self.calls, self.update_status, self.served_version = [], update_status, served_version
        self.version = "0"

    def __call__(self, request):
        path = request.url.path
        self.calls.append((request.url.host, path))
        if path == "/update_weights_from_disk":
            body = json.loads(request.content)
            if self.update_status != 200:
                return httpx.Response(self.update_status, json={
                    "success": False, "message": f"no such dir {body['model_path']}"})
            self.version = body["weight_version"]
            return httpx.Response(200, json={"success": True, "message": "ok"})
        if path == "/get_model_info":
            return httpx.Response(200, json={"weight_version": self.served_version or self.version})
        return httpx.Response(200, json={"status": "ok"})


def test_update_weights_from_disk_sequence_and_verification():
    ctl = FakeControl()
    client = fake(ctl, urls=["http://a:1", "http://b:2"])
    client.update_weights("/ckpt/step_5", "5")
    paths = [p for _, p in ctl.calls]
    assert paths == ["/pause_generation"] * 2 + ["/update_weights_from_disk"] * 2 + [
        "/continue_generation"] * 2 + ["/get_model_info"] * 2
    assert client.weight_version == "5"
    with pytest.raises(TypeError, match="directory path"):
        client.update_weights({"w": 1}, "6")


def test_update_failure_still_continues_and_reports_message():
    ctl = FakeControl(update_status=400)
    with pytest.raises(SGLangRequestError, match="no such dir /nope"):
        fake(ctl).update_weights_from_disk("/nope", "1")
    assert ctl.calls[-1][1] == "/continue_generation"


def test_update_version_mismatch_names_server():
    ctl = FakeControl(served_version="stale")
    with pytest.raises(SGLangResponseError, match=r"http://a:1: serves weight_version 'stale'"):
        fake(ctl, urls="http://a:1").update_weights_from_disk("/ckpt", "2")
