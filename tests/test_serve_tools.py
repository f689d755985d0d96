"""The serving tools' shared client pieces (gpu.lab.tools.serve_load) against a local stand-in
server whose streamed chunks are known: ``stream`` returns their text in order, one arrival
per chunk, the first chunk's time as TTFT and the last finish reason; ``record`` resumes a
run's JSON and stamps it with the command that runs the tool."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from gpu.lab.tools.serve_load import record, stream

CHUNKS = [{"choices": [{"delta": {"content": "The number"}, "finish_reason": None}]},
          {"choices": [{"delta": {"content": " is 42"}, "finish_reason": None}]},
          {"choices": [{"delta": {}, "finish_reason": "stop"}]}]


class _SSE(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert body["stream"] is True and body["model"] == "m"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in CHUNKS:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


def test_stream_reads_every_chunk_of_a_chat_completion():
    server = HTTPServer(("127.0.0.1", 0), _SSE)
    threading.Thread(target=server.handle_request, daemon=True).start()
    got = stream(server.server_address[1], "/v1/chat/completions",
                 {"model": "m", "messages": [{"role": "user", "content": "?"}]})
    server.server_close()
    assert got["text"] == "The number is 42" and got["finish_reason"] == "stop"
    assert got["status"] == 200 and len(got["arrivals"]) == len(CHUNKS)
    assert got["arrivals"] == sorted(got["arrivals"])
    assert 0 <= got["ttft"] <= got["seconds"]


def test_record_resumes_and_stamps_the_command(tmp_path):
    path, result = record(tmp_path, "tiny", "chat.json", "serve_chat", ["--turns", "2"],
                          model="tiny", seed=3)
    assert path == tmp_path / "tiny" / "chat.json" and path.parent.is_dir()
    assert result["command"] == "python -m gpu.lab.tools.serve_chat --turns 2"
    assert result["model"] == "tiny" and result["seed"] == 3 and "arms" not in result
    path.write_text(json.dumps({**result, "arms": {"stock": {"done": 1}}}))
    _, again = record(tmp_path, "tiny", "chat.json", "serve_chat", ["--turns", "4"], seed=5)
    assert again["arms"] == {"stock": {"done": 1}} and again["seed"] == 5
    assert again["command"].endswith("--turns 4")
